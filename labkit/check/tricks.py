"""Checker for notebook 09 (memory tricks): the learner's gradient-accumulation loop.

`accumulate_gradients(fn)` runs fn(model, x, y, micro) on every rank: the rank's batch (x, y)
cut into `micro` micro-batches, each forward and backward, and the gradients averaged over
the ranks, so that every `.grad` ends as one process's gradient of the mean loss over the
global batch (all ranks' sequences). The model is AwkwardNet: a tied weight and a frozen
parameter (its .grad stays None). The checker names the usual mistakes: the loss not divided
by the number of micro-batches (micro x), divided twice (1/micro), zero_grad inside the loop
(only the last micro-batch left), one micro-batch only, no all-reduce, a sum over ranks instead
of the mean (N x), a mean taken twice (1/N), an all-reduce after every micro-batch (right
values, micro times the bytes), a step taken, the frozen parameter's None gradient used.

Right gradients are not enough: the checker watches how they were made (`Watch`, on the rank; it
and `AsWorld` live in labkit/check/tricks_watch.py): one forward per micro-batch, each on its
own micro-batch (together the local batch, once), each forward's backward before the next
forward, the bytes autograd saved for backward never above 1.5x the reference loop's (one
micro-batch's), each gradient all-reduced once after the last micro-batch, and at most the
reference's bytes on the wire (1.00x, BYTES_SLACK). Then the same function runs on another world
size (the ranks split into groups, each taken as the whole world for the call: `AsWorld`), so an
answer written for 2 ranks (a partner 1 - r, a 2 in the code) fails there.
"""
from labkit.check.core import checker, new_token, ranks_verdict
from labkit.check.guard import HANG_LIMIT_S
from labkit.check.tricks_watch import AsWorld, Watch, split_world
from labkit.i18n import tr

__all__ = ["accumulate_gradients"]

RTOL, ATOL = 1e-4, 1e-6


def _grads(model):
    return {k: None if p.grad is None else p.grad.detach().clone() for k, p in model.named_parameters()}


def _one_process(state, X, Y, scale=1.0):
    """Gradients of one process on (X, Y), mean loss, times `scale`."""
    from labkit.toy_models import AwkwardNet, lm_loss
    m = AwkwardNet()
    m.load_state_dict(state)
    (lm_loss(m(X), Y) * scale).backward()
    return _grads(m)


def _same(a, b) -> bool:
    import torch
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL))


def _match(got, want) -> bool:
    return all(_same(got[k], want[k]) for k in want if want[k] is not None)


def _drive(fn, token, micro: int = 3, per_rank: int = 6):
    """On each rank: the learner's fn against one process on the global batch and the mistakes'
    gradients (all computed here on the global batch: no collective besides the learner's), how
    it accumulated (Watch), then the same on another world size."""
    import torch
    import torch.distributed as dist
    from labkit.check import guard
    from labkit.comm import traffic
    from labkit.toy_models import AwkwardNet, awkward_batch
    from labkit.tricks.accumulation import accumulate
    n, r = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = AwkwardNet()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    X, Y = awkward_batch(n * per_rank, seed=5)
    mine = slice(r * per_rank, (r + 1) * per_rank)
    with traffic.measure(sync=True) as t, Watch(model, X[mine]) as watch:
        _, caught = guard.attempt(fn, model, X[mine].clone(), Y[mine].clone(), micro)
    got = _grads(model)
    changed = any(not torch.equal(p.detach(), state[k]) for k, p in model.named_parameters())
    ref = AwkwardNet()
    ref.load_state_dict(state)
    with traffic.measure(sync=True) as t_ref, Watch(ref, X[mine]) as ref_watch:
        accumulate(ref, X[mine], Y[mine], micro)
    size = per_rank // micro
    last = torch.cat([torch.arange(q * per_rank + per_rank - size, (q + 1) * per_rank) for q in range(n)])
    first = torch.cat([torch.arange(q * per_rank, q * per_rank + size) for q in range(n)])
    cands = {
        "right": _one_process(state, X, Y),
        "local": _one_process(state, X[mine], Y[mine]),
        "sum": _one_process(state, X, Y, n),
        "mean_twice": _one_process(state, X, Y, 1 / n),
        "undivided": _one_process(state, X, Y, micro),
        "twice": _one_process(state, X, Y, 1 / micro),
        "last": _one_process(state, X[last], Y[last], 1 / micro),
        "last_whole": _one_process(state, X[last], Y[last]),
        "first": _one_process(state, X[first], Y[first], 1 / micro),
        "first_whole": _one_process(state, X[first], Y[first]),
    }
    verdict = None
    frozen = [k for k, p in model.named_parameters() if not p.requires_grad]
    if caught is not None and frozen and "NoneType" in caught.message:
        verdict = tr("rank {r}: your function raised {kind} ({message}) because {name!r} is frozen "
                     "(requires_grad=False), so its .grad is None: skip parameters whose .grad is None",
                     r=r, kind=caught.type, message=caught.message.splitlines()[0][:120], name=frozen[0])
        caught = None
    elif caught is None:
        verdict = (_verdict(got, cands, changed, micro, n, r, t.sent, t_ref.sent)
                   or _accumulated(watch, ref_watch, micro, r, t.sent, t_ref.sent))
    flags = guard.settle(token, "accumulate", caught or (verdict if verdict else None))
    out = {"raised": caught, "problem": verdict, "sent": t.sent, "ref_sent": t_ref.sent,
           "saved": watch.peak, "ref_saved": ref_watch.peak}
    if any(flags):
        return out
    # the second case: the same function on another world size (a group of the ranks as the world)
    group, ranks = split_world(n)
    k = len(ranks)
    model = AwkwardNet()
    model.load_state_dict(state)
    rows = torch.cat([torch.arange(q * per_rank, (q + 1) * per_rank) for q in ranks])
    with AsWorld(group):
        _, caught = guard.attempt(fn, model, X[mine].clone(), Y[mine].clone(), micro)
    verdict = None
    if caught is not None:
        caught.hint = tr("in the second case, on a world of size {k}: your function must work for any "
                         "world size (is a partner rank or the number 2 written in it?)", k=k)
    else:
        verdict = _other_size(_grads(model), _one_process(state, X[rows], Y[rows]), n, k, r)
    guard.settle(token, "accumulate-group", caught or (verdict if verdict else None))
    out.update(raised=caught, problem=verdict)
    return out


def _scale(got, want):
    """c when every gradient is c x the wanted one (c != 1, to rtol 1e-3), else None."""
    import torch
    if any(got[p] is None or got[p].shape != want[p].shape for p in want if want[p] is not None):
        return None
    ratios = [(got[p] / want[p])[want[p].abs() > 1e-6] for p in want if want[p] is not None]
    flat = torch.cat([q.flatten() for q in ratios]) if ratios else torch.zeros(0)
    if not flat.numel():
        return None
    c = float(flat.median())
    same = bool(torch.allclose(flat, torch.full_like(flat, c), rtol=1e-3))
    return c if same and abs(c - 1) > 1e-3 else None


def _other_size(got, want, n, k, r):
    """The diagnosis of the second case (a world of k ranks), None when right."""
    if _match(got, want):
        return None
    c = _scale(got, want)
    if c is not None:
        return tr("rank {r}: right on the {n} ranks of the first case, but on a world of size {k} your "
                  "gradients are {c:.3g} x the mean: divide by dist.get_world_size(), not by a number "
                  "written in the code", r=r, n=n, k=k, c=c)
    name = next(p for p in want if want[p] is not None and not _same(got[p], want[p]))
    return tr("rank {r}: right on the {n} ranks of the first case, but on a world of size {k} the "
              "gradient of {name!r} differs from one process's on those ranks' batch by up to {err:.3g}: "
              "average over every rank of the world (dist.all_reduce), not over a partner",
              r=r, n=n, k=k, name=name, err=float((got[name] - want[name]).abs().max()))


SAVED_SLACK = 1.5   # saved bytes alive at once, against the reference's (one micro-batch's): an
                    # answer that keeps two micro-batches' graphs keeps 2x; the same loop written
                    # with another loss call saves a few tensors more or less, well under 1.5x
BYTES_SLACK = 1.02  # bytes sent, against the reference's one all-reduce of each gradient: no right
                    # answer sends more (one flat all-reduce sends less: fewer message headers),
                    # and the smallest excess (one more all-reduce of the smallest gradient, fc2's
                    # bias, 13 floats + gloo's 96 + 48 B per message) is above 2% of the total here


def _accumulated(watch, ref, micro, r, sent, ref_sent):
    """With right gradients: did the answer accumulate? One forward per micro-batch, each on its
    own micro-batch, its backward before the next forward, one micro-batch's activations alive,
    and one all-reduce of each gradient after the last micro-batch."""
    b = watch.x.shape[0]
    size = b // micro
    f = len(watch.forwards)
    rows = watch.rows()
    if f != micro:
        if f == 1 and sorted(rows[0]) == list(range(b)):
            return tr("rank {r}: right gradients, but from one forward and backward on the whole local "
                      "batch of {b} sequences: nothing was accumulated, and the activations are the big "
                      "batch's; cut it into {micro} micro-batches of {size} (x.chunk(micro)) and run "
                      "forward and backward on each", r=r, b=b, micro=micro, size=size)
        return tr("rank {r}: right gradients, but your function ran {f} forwards for {micro} "
                  "micro-batches: one forward per micro-batch of {size} sequences", r=r, f=f,
                  micro=micro, size=size)
    for k, seen in enumerate(rows):
        if tuple(watch.forwards[k].shape[1:]) != tuple(watch.x.shape[1:]):
            return tr("rank {r}: right gradients, but forward {k} saw a tensor of shape {shape} from a "
                      "local batch of shape {whole}: cut the batch dimension (dim 0), not the sequence",
                      r=r, k=k, shape=tuple(watch.forwards[k].shape), whole=tuple(watch.x.shape))
        if len(seen) != size:
            return tr("rank {r}: right gradients, but forward {k} saw {got} sequences: each "
                      "micro-batch has {size} (the local batch of {b} cut into {micro})",
                      r=r, k=k, got=len(seen), size=size, b=b, micro=micro)
    if sorted(i for seen in rows for i in seen) != list(range(b)):
        return tr("rank {r}: right gradients, but the micro-batches do not cover the local batch "
                  "once each: cut x into {micro} disjoint parts", r=r, micro=micro)
    backs = [k for e, k in watch.events if e == "B"]
    for k in range(f):
        if backs.count(k) != 1:
            return tr("rank {r}: right gradients, but forward {k}'s output went through {c} backward "
                      "passes: one backward per micro-batch", r=r, k=k, c=backs.count(k))
    order = [e for e, _ in watch.events]
    before = order.index("B") if "B" in order else len(order)
    if before > 1:
        return tr("rank {r}: right gradients, but {f} forwards ran before the first backward: every "
                  "micro-batch's activations were alive at once ({x:.1f}x one micro-batch's saved "
                  "bytes), which is what accumulation avoids; call backward on each micro-batch's loss "
                  "right after its forward", r=r, f=before, x=watch.peak / max(ref.peak, 1))
    if watch.peak > SAVED_SLACK * ref.peak:
        return tr("rank {r}: right gradients, but up to {x:.1f}x one micro-batch's saved activations "
                  "were alive at once (retain_graph=True, or a graph kept alive by a tensor you kept): "
                  "let each backward free its micro-batch's graph", r=r, x=watch.peak / max(ref.peak, 1))
    early = [c for c in watch.reduces if c[2] < micro]
    if early:
        return tr("right gradients, but rank {r} all-reduced after micro-batch {k} of {micro}: "
                  "all-reduce once, after the last of the {micro} micro-batches (not after every "
                  "one)", r=r, k=early[0][2], micro=micro)
    seen = [ptr for ptr, _, _ in watch.reduces]
    twice = [ptr for ptr in set(seen) if seen.count(ptr) > 1]
    if twice:
        return tr("right gradients, but rank {r} all-reduced one gradient {c} times (a tied weight is one "
                  "parameter: model.parameters() lists it once; a list built from the modules holds "
                  "it twice): all-reduce each gradient once", r=r, c=max(seen.count(p) for p in twice))
    if ref_sent and sent > BYTES_SLACK * ref_sent:
        return tr("right gradients, but rank {r} sent {ratio:.2f}x the bytes of one all-reduce of each "
                  "gradient: all-reduce each gradient once, after the last of the {micro} micro-batches",
                  r=r, ratio=sent / ref_sent, micro=micro)
    return None


def _verdict(got, cands, changed, micro, n, r, sent, ref_sent):
    if changed:
        return tr("rank {r}: your function changed the weights: leave the update to the optimizer "
                  "(no optimizer.step() inside the accumulation loop)", r=r)
    for k, g in got.items():
        if cands["right"][k] is None and g is not None:
            return tr("rank {r}: {k!r} is frozen and has no gradient, but your function gave it one: "
                      "skip parameters whose .grad is None", r=r, k=k)
    if _match(got, cands["right"]):
        return None             # how it got there: _accumulated
    words = {
        "local": lambda: tr("your gradients are this rank's own: they were not averaged over the ranks "
                            "(after the last micro-batch, all-reduce each .grad, then divide by the world "
                            "size {n})", n=n),
        "sum": lambda: tr("your gradients are exactly {n} x the mean, the sum over ranks: divide by the "
                          "world size ({n}) after the all-reduce", n=n),
        "mean_twice": lambda: tr("your gradients are 1/{n} of the mean: they were averaged over the {n} "
                                 "ranks twice (ReduceOp.AVG already divides by the world size; do not "
                                 "divide again)", n=n),
        "undivided": lambda: tr("your gradients are exactly {micro} x the big-batch gradient, because each "
                                "micro-batch's loss was not divided: divide each micro-batch's loss by the "
                                "number of micro-batches ({micro}) before backward", micro=micro),
        "twice": lambda: tr("your gradients are the big-batch gradient divided by {micro} once more: "
                            "divide each micro-batch's loss by the number of micro-batches once", micro=micro),
        "last": lambda: tr("only the last micro-batch's gradient is left in .grad: zero_grad() (or .grad = "
                           "None) inside the loop throws the earlier ones away; let backward() add them "
                           "up in .grad"),
        "last_whole": lambda: tr("only the last micro-batch's gradient is left in .grad, and its loss was "
                                 "not divided: do not zero the gradients inside the loop, and divide each "
                                 "loss by the number of micro-batches ({micro})", micro=micro),
        "first": lambda: tr("only the first micro-batch counted: run forward and backward on every "
                            "micro-batch"),
        "first_whole": lambda: tr("only the first micro-batch counted: run forward and backward on every "
                                  "micro-batch, each loss divided by the number of micro-batches"),
    }
    for name, text in words.items():
        if _match(got, cands[name]):
            return tr("rank {r}: {why}", r=r, why=text())
    missing = [k for k, g in got.items() if g is None and cands["right"][k] is not None]
    if missing:
        return tr("rank {r}: {name!r} has no gradient (.grad is None) after your function: run "
                  "backward on every micro-batch and leave the gradients in .grad", r=r, name=missing[0])
    c = _scale(got, cands["right"])
    if c is not None:
        return tr("rank {r}: your gradients are {c:.3g} x one process's on the global batch, every one of "
                  "them: a factor is wrong (divide each loss by the number of micro-batches, {micro}, "
                  "and the all-reduced sum by dist.get_world_size(), {n})", r=r, c=c, micro=micro, n=n)
    k = next(k for k in got if cands["right"][k] is not None and not _same(got[k], cands["right"][k]))
    err = (got[k] - cands["right"][k]).abs().max().item()
    return tr("rank {r}: the gradient of {k!r} differs from one process's gradient on the global "
              "batch by up to {err:.3g}", r=r, k=k, err=err)


@checker("accumulate_gradients")
def accumulate_gradients(fn, cluster, micro: int = 3, timeout: float = HANG_LIMIT_S):
    """fn(model, x, y, micro) on every rank: accumulate over micro-batches, average over ranks."""
    results = cluster.run(_drive, fn, new_token(timeout), micro, 2 * micro, timeout=timeout)
    verdict = ranks_verdict(results)
    if verdict:
        return verdict
    sent = max(res["sent"] / res["ref_sent"] for res in results) if all(res["ref_sent"] for res in results) else None
    saved = max(res["saved"] / max(res["ref_saved"], 1) for res in results)
    k = cluster.world_size - 1 if cluster.world_size > 2 else 1
    return True, tr("{n} ranks x {micro} micro-batches: every gradient equals one process's on the "
                    "global batch (rtol {rtol:g}), with a tied and a frozen parameter; one forward and "
                    "one backward per micro-batch, saved activations {saved:.2f}x one micro-batch's; "
                    "{traffic}; the same on a world of size {k}", n=cluster.world_size, micro=micro,
                    rtol=RTOL, saved=saved, k=k,
                    traffic=tr("{x:.2f}x the bytes of one all-reduce of the gradients", x=sent)
                    if sent is not None else tr("one all-reduce of each gradient"))
