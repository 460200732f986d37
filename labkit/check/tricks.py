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
"""
from labkit.check.core import checker, new_token, ranks_verdict
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr

__all__ = ["accumulate_gradients"]

RTOL, ATOL = 1e-4, 1e-6


def _grads(model):
    return {k: None if p.grad is None else p.grad.detach().clone() for k, p in model.named_parameters()}


def _one_process(state, X, Y, scale=1.0):
    """Gradients of one process on (X, Y), mean loss, times `scale`."""
    from labkit.models import AwkwardNet, lm_loss
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
    gradients (all computed here on the global batch: no collective besides the learner's)."""
    import torch
    import torch.distributed as dist
    from labkit.check import guard
    from labkit.comm import traffic
    from labkit.models import AwkwardNet, awkward_batch
    from labkit.tricks.accumulation import accumulate
    n, r = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = AwkwardNet()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    X, Y = awkward_batch(n * per_rank, seed=5)
    mine = slice(r * per_rank, (r + 1) * per_rank)
    with traffic.measure(sync=True) as t:
        _, caught = guard.attempt(fn, model, X[mine].clone(), Y[mine].clone(), micro)
    got = _grads(model)
    changed = any(not torch.equal(p.detach(), state[k]) for k, p in model.named_parameters())
    ref = AwkwardNet()
    ref.load_state_dict(state)
    with traffic.measure(sync=True) as t_ref:
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
        verdict = _verdict(got, cands, changed, micro, n, r, t.sent, t_ref.sent)
    guard.settle(token, "accumulate", caught or (verdict if verdict else None))
    return {"raised": caught, "problem": verdict, "sent": t.sent, "ref_sent": t_ref.sent}


def _verdict(got, cands, changed, micro, n, r, sent, ref_sent):
    if changed:
        return tr("rank {r}: your function changed the weights: leave the update to the optimizer "
                  "(no optimizer.step() inside the accumulation loop)", r=r)
    for k, g in got.items():
        if cands["right"][k] is None and g is not None:
            return tr("rank {r}: {k!r} is frozen and has no gradient, but your function gave it one: "
                      "skip parameters whose .grad is None", r=r, k=k)
    if _match(got, cands["right"]):
        if ref_sent and sent > 1.5 * ref_sent:
            return tr("right gradients, but rank {r} sent {ratio:.1f}x the bytes of one all-reduce per "
                      "parameter: all-reduce once, after the last of the {micro} micro-batches (not after "
                      "every one)", r=r, ratio=sent / ref_sent, micro=micro)
        return None
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
    return True, tr("{n} ranks x {micro} micro-batches: every gradient equals one process's on the "
                    "global batch (rtol {rtol:g}), with a tied and a frozen parameter, and no more "
                    "traffic than one all-reduce of the gradients", n=cluster.world_size, micro=micro,
                    rtol=RTOL)
