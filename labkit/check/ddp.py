"""Checkers for notebook 03 (data parallel).

- `replicas_in_sync(model)`: call on every rank; compares a hash of every parameter across
  ranks and names the first that differs (the notes: "检查 all-reduce 是否真的发生").
- `average_gradients(fn)`: the learner's gradient all-reduce, trained against one process.
"""
import hashlib

from labkit.check.core import checker, report

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
    detail = f"{len(hashes)} parameters bit-identical on {n} ranks"
    if not ok:
        i = int(differs.nonzero()[0])
        ranks = [r for r in range(n) if every[r, i] != every[0, i]]
        ref = params[i].detach().clone()
        dist.broadcast(ref, dist.get_global_rank(group, 0) if group is not None else 0, group=group)
        gap = (params[i].detach() - ref).abs().max().reshape(1).to(torch.float64)
        dist.all_reduce(gap, op=dist.ReduceOp.MAX, group=group)
        detail = (f"{hashes[i][0]!r} differs: rank{'s' if len(ranks) > 1 else ''} "
                  f"{', '.join(map(str, ranks))} != rank 0, max |diff| {gap.item():.3g}; "
                  f"{int(differs.sum())} of {len(hashes)} parameters differ - "
                  "a gradient that was not all-reduced, or weights not broadcast at the start?")
    if not quiet and dist.get_rank() == 0:
        report("replicas_in_sync", ok, detail)
    return ok


@checker("average_gradients")
def average_gradients(fn, cluster, steps: int = 3):
    """fn(model), called after loss.backward() on every rank, must leave in each parameter's
    .grad the mean of that gradient over ranks. Checked by training AwkwardNet (tied weight,
    frozen and unused parameters) for `steps` SGD steps against one process on the global batch."""
    from labkit.ddp.parity import train_parity
    results = cluster.run(train_parity, fn, steps=steps, with_unused=True, timeout=60)
    for rank, res in enumerate(results):
        for step, (d, name) in enumerate(zip(res["diffs"], res["where"]), 1):
            if not d <= 1e-5:
                return False, (f"rank {rank}, after step {step}: parameter {name!r} differs "
                               f"from one process on the global batch by {d:.3g} (every gradient "
                               "all-reduced, then divided by the world size?)")
    return True, (f"{cluster.world_size} ranks, {steps} steps: same weights as one process on the "
                  "global batch, with a tied, a frozen and an unused parameter")
