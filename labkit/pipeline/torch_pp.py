"""The same model through torch.distributed.pipelining, for comparison (layer 3).

    cluster.run(torch_step, "1f1b", microbatches=8)     # ScheduleGPipe / Schedule1F1B / ScheduleInterleaved1F1B

Each rank wraps its parts of `mlp(layers)` in `PipelineStage`s (rank r holds virtual stages
r, p+r, ... as in labkit's interleaved schedule), runs `warmup` steps and then `repeats` timed
steps, and checks its gradients against one process on the whole batch. torch divides the
gradients by m (scale_grads=True) and each micro-batch's loss is its mean squared error, so
the loss is the mean over micro-batches: the same number labkit's executor reports.
"""
import time

from labkit.pipeline.toy_mlp import batch, mlp, reference_grads, split

__all__ = ["torch_step", "TORCH_SCHEDULES"]

TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved": "ScheduleInterleaved1F1B"}


def torch_step(kind: str, microbatches: int, layers: int = 8, width: int = 64, microbatch_size: int = 4,
               chunks: int = 2, warmup: int = 1, repeats: int = 3) -> dict:
    """Run on every rank. Returns the loss (last rank), step times in seconds (slowest rank,
    each step between barriers) and the largest gradient difference from one process."""
    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining as pp
    if kind not in TORCH_SCHEDULES:
        raise ValueError(f"kind must be one of {sorted(TORCH_SCHEDULES)}, got {kind!r}")
    rank, p = dist.get_rank(), dist.get_world_size()
    v = chunks if kind == "interleaved" else 1
    model = mlp(layers, width)
    parts = split(model, p * v)
    mine = [c * p + rank for c in range(v)]
    stages = [pp.PipelineStage(parts[vs], vs, p * v, torch.device("cpu")) for vs in mine]
    loss_fn = lambda out, target: torch.nn.functional.mse_loss(out, target)   # noqa: E731
    cls = getattr(pp, TORCH_SCHEDULES[kind])
    sched = cls(stages if v > 1 else stages[0], microbatches, loss_fn=loss_fn)
    x, y = batch(microbatch_size * microbatches, width)
    first, last = 0 in mine, p * v - 1 in mine
    times, losses = [], []
    for step in range(warmup + repeats):
        model.zero_grad(set_to_none=True)
        losses = []
        dist.barrier()
        t0 = time.perf_counter()
        args = (x,) if first else ()
        kwargs = {"target": y, "losses": losses} if last else {}
        sched.step(*args, **kwargs)
        dist.barrier()
        if step >= warmup:
            took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=x.device)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times.append(float(took))
    ref, ref_loss = reference_grads(mlp(layers, width), x, y)
    diff = 0.0
    for vs in mine:
        for name, q in parts[vs].named_parameters():
            if ref[name] is not None and q.grad is not None:
                diff = max(diff, float((q.grad - ref[name]).abs().max()))
            elif (ref[name] is None) != (q.grad is None):
                diff = float("inf")
    loss = float(sum(float(t.detach()) for t in losses) / len(losses)) if last and losses else None
    return {"rank": rank, "loss": loss, "reference_loss": ref_loss, "times": times, "grad_diff": diff,
            "schedule": TORCH_SCHEDULES[kind]}
