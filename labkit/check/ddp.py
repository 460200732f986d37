"""Checkers for notebook 03 (data parallel).

- `replicas_in_sync(model)`: call on every rank; compares a hash of every parameter across
  ranks and names the first that differs (the notes: "检查 all-reduce 是否真的发生").
- `average_gradients(fn)`: the learner's gradient all-reduce, trained against one process.
"""
import hashlib

from labkit.check.core import checker, new_token, ranks_verdict, report
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr

__all__ = ["replicas_in_sync", "average_gradients", "param_hashes"]


def param_hashes(model) -> list:
    """(name, 64-bit hash of the parameter's bytes) for every parameter, in order."""
    import torch
    out = []
    for name, p in model.named_parameters():
        raw = p.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()
        h = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True)
        out.append((name, h))
    return out


def replicas_in_sync(model, group=None, quiet: bool = False) -> bool:
    """Call on every rank (it is a collective). True when every parameter is bit-identical on
    every rank; else rank 0 prints the first parameter that differs, on which ranks, and by
    how much. Prints one line on rank 0 unless quiet. A DDP wrapper is looked through."""
    import torch
    import torch.distributed as dist
    model = getattr(model, "module", model)
    hashes = param_hashes(model)
    params = [p for _, p in model.named_parameters()]
    dev = params[0].device if params else torch.device("cpu")
    mine = torch.tensor([h for _, h in hashes], dtype=torch.int64, device=dev)
    n = dist.get_world_size(group)
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine, group=group)
    every = torch.stack(every).cpu()                          # [ranks, params]
    differs = (every != every[0]).any(dim=0)
    ok = not bool(differs.any())
    detail = tr("{count} parameters bit-identical on {n} ranks", count=len(hashes), n=n)
    if not ok:
        i = int(differs.nonzero()[0])
        ranks = [r for r in range(n) if every[r, i] != every[0, i]]
        ref = params[i].detach().clone()
        dist.broadcast(ref, dist.get_global_rank(group, 0) if group is not None else 0, group=group)
        gap = (params[i].detach() - ref).abs().max().reshape(1).to(torch.float64)
        dist.all_reduce(gap, op=dist.ReduceOp.MAX, group=group)
        detail = tr("{name!r} differs: {ranks} != rank 0, max |diff| {gap:.3g}; {k} of {count} "
                    "parameters differ - a gradient that was not all-reduced, or weights not "
                    "broadcast at the start?", name=hashes[i][0],
                    ranks=("ranks " if len(ranks) > 1 else "rank ") + ", ".join(map(str, ranks)),
                    gap=gap.item(), k=int(differs.sum()), count=len(hashes))
    if not quiet and dist.get_rank() == 0:
        report("replicas_in_sync", ok, detail)
    return ok


def _close(a, b) -> bool:
    import torch
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-4, atol=1e-6))


def _grad_problem(name, p, want, mine, before, n) -> str:
    """What is wrong with parameter `name` after the learner's function, or ''. want: the mean
    gradient over ranks (one process on the global batch); mine: this rank's own gradient."""
    import torch
    g = p.grad
    if not torch.equal(p.detach(), before):
        return tr("your function changed the parameter {name!r} itself: average its .grad and "
                  "leave the weights to the optimizer", name=name)
    if want is None:
        if g is None:
            return ""
        why = tr("is frozen (requires_grad=False)") if not p.requires_grad else tr("is not used in forward")
        return tr("{name!r} {why} and has no gradient on any rank, but your function gave it "
                  "one: leave .grad None there, as DDP does (an optimizer with weight decay would "
                  "move it otherwise)", name=name, why=why)
    if g is None:
        return tr("{name!r} lost its gradient: .grad is None after your function", name=name)
    if _close(g, want):
        return ""
    if _close(g, mine):
        return tr("{name!r} still holds this rank's own gradient: it was not averaged over the "
                  "ranks (all_reduce works in place on the tensor you give it: all-reduce p.grad "
                  "itself, or copy the result back into p.grad)", name=name)
    if _close(g, want * n):
        return tr("{name!r} is exactly {n} x the mean gradient, the sum over ranks: divide by "
                  "the world size ({n})", name=name, n=n)
    if _close(g, want / n):
        return tr("{name!r} is the mean gradient divided by {n} again: divide by the world size once",
                  name=name, n=n)
    if _close(g, mine / n):
        return tr("{name!r} is this rank's own gradient divided by {n}: all-reduce it (sum over "
                  "the ranks) before dividing", name=name, n=n)
    err = (g - want).abs().max().item()
    return tr("{name!r} differs from the mean gradient over ranks (one process on the global "
              "batch) by up to {err:.3g}", name=name, err=err)


def _none_hint(model) -> str:
    names = [name for name, p in model.named_parameters() if p.grad is None]
    if not names:
        return ""
    return tr("{name!r} has no gradient (.grad is None: a frozen parameter, or one not used "
              "in forward): skip parameters whose .grad is None, as DDP does", name=names[0])


def _drive_average(fn, token, steps: int, batch: int = 3, lr: float = 0.1):
    """On each rank: train AwkwardNet with the learner's gradient averaging and, alongside,
    one process on the global batch (the reference); after each backward compare every
    gradient the learner's fn leaves with the reference's. Every rank stops at the same step.
    Returns {"ok"}, {"raised": Caught or None} or {"problem": text or None, "step": k}."""
    import torch
    import torch.distributed as dist
    from labkit.check import guard
    from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = AwkwardNet(with_unused=True)
    torch.manual_seed(0)
    ref = AwkwardNet(with_unused=True)                     # the same initial weights
    bufs, ref_bufs = {}, {}                                # momentum buffers
    for step in range(steps):
        x, y = awkward_batch(n * batch, seed=1000 + step)
        lm_loss(ref(x), y).backward()                      # one process, global batch
        want = {k: None if p.grad is None else p.grad.clone() for k, p in ref.named_parameters()}
        mine = slice(rank * batch, (rank + 1) * batch)
        lm_loss(model(x[mine]), y[mine]).backward()
        local = {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()}
        before = {k: p.detach().clone() for k, p in model.named_parameters()}
        _, caught = guard.attempt(fn, model)
        problem = None
        if caught is not None:
            if caught.type in ("TypeError", "AttributeError") and "NoneType" in caught.message:
                caught.hint = _none_hint(model)
        else:
            problem = next((tr("rank {rank}, step {step}: {why}", rank=rank, step=step + 1, why=why) for why in
                            (_grad_problem(k, p, want[k], local[k], before[k], n)
                             for k, p in model.named_parameters()) if why), None)
        flags = guard.settle(token, str(step), caught or problem)
        if any(flags):
            return {"raised": caught, "problem": problem, "step": step + 1}
        _sgd(model, bufs, lr)
        _sgd(ref, ref_bufs, lr)
    return {"ok": True}


def _sgd(model, bufs, lr=0.1, momentum=0.9) -> None:
    """One SGD step with momentum, as torch.optim.SGD takes it (written out: torch's optimizers
    import their compiler on first use, seconds on a busy machine, which the learner's
    timeout must not pay). Parameters without a gradient do not move."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.grad is None:
                continue
            buf = bufs.get(name)
            bufs[name] = buf = p.grad.clone() if buf is None else buf.mul_(momentum).add_(p.grad)
            p.add_(buf, alpha=-lr)
            p.grad = None


@checker("average_gradients")
def average_gradients(fn, cluster, steps: int = 3, timeout: float = HANG_LIMIT_S):
    """fn(model), called after loss.backward() on every rank, must leave in each parameter's
    .grad the mean of that gradient over ranks (and None where there is none). Checked by
    training AwkwardNet (tied weight, frozen and unused parameters) for `steps` SGD steps
    against one process on the global batch, comparing every gradient after each step."""
    results = cluster.run(_drive_average, fn, new_token(timeout), steps, timeout=timeout)
    verdict = ranks_verdict(results)
    if verdict:
        return verdict
    return True, tr("{n} ranks, {steps} steps: every gradient is the mean over ranks, as one "
                    "process on the global batch gets it, with a tied, a frozen and an unused "
                    "parameter", n=cluster.world_size, steps=steps)
