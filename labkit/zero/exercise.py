"""The stage-1 exercise on the ranks (layer 5 glue): the learner's sharded step, the
reference, one process, side by side. Used by `labkit.check.zero1_step`.

The learner writes  step(params, grads, momentum, lr, beta)  run on every rank:
  params    the full flat parameters, identical on every rank (length L, not a multiple of N)
  grads     this rank's own local gradient (its micro-batch), not yet reduced
  momentum  a dict kept between steps, where the rank stores its optimizer state
It must leave in `params` what one process gets with SGD + momentum on the mean gradient,
keeping momentum only for its own shard (chunk_bounds(L, N)[rank]).
"""
import torch
import torch.distributed as dist

from labkit.comm import chunk_bounds, ring_all_gather, ring_reduce_scatter, traffic


def reference_step(params, grads, momentum, lr=0.1, beta=0.9):
    """labkit's ZeRO-1 step: reduce-scatter, update my shard, all-gather."""
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    g = ring_reduce_scatter(grads.clone()) / n          # my shard of the mean gradient
    buf = momentum.setdefault("buf", params.new_zeros(hi - lo))
    buf.mul_(beta).add_(g)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def local_grad(length: int, step: int, rank: int) -> torch.Tensor:
    """The same numbers on every rank and device: drawn on the CPU, then on the rank's device."""
    import labkit
    g = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randn(length, generator=g, device="cpu").to(labkit.device())


def trial(fn, length: int = 37, steps: int = 3, lr: float = 0.1, beta: float = 0.9,
          big: int = 40_003) -> dict:
    """Run `fn` and the one-process reference `steps` steps; also bytes sent for one step
    on a `big`-element vector. Returns what the checker needs to word its verdict."""
    import labkit
    rank, n = dist.get_rank(), dist.get_world_size()
    init = torch.randn(length, generator=torch.Generator().manual_seed(1), device="cpu").to(labkit.device())
    params, one, buf, momentum = init.clone(), init.clone(), init.new_zeros(length), {}
    out = {"init": init, "after": [], "one": [], "state": None, "lr": lr}
    for step in range(steps):
        mean = torch.stack([local_grad(length, step, r) for r in range(n)]).mean(0)
        buf.mul_(beta).add_(mean)                       # one process, global batch
        one -= lr * buf
        fn(params, local_grad(length, step, rank).clone(), momentum, lr, beta)
        out["after"].append(params.clone())
        out["one"].append(one.clone())
    out["state"] = {k: v.numel() for k, v in momentum.items() if isinstance(v, torch.Tensor)}
    out["bounds"] = chunk_bounds(length, n)[rank]
    if big:
        p, g, m = init.new_zeros(big), local_grad(big, 0, rank), {}
        dist.barrier()
        with traffic.measure(sync=True) as t:
            fn(p, g, m, lr, beta)
        out["sent"], out["big"] = t.sent, big
    return out
