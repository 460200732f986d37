"""Checker for notebook 06 (tensor parallelism): the learner's row-parallel linear.

`row_parallel(Fn)`: Fn is a torch.autograd.Function with
    forward(ctx, x_shard, weight_shard, bias, group) -> y        (the whole output, every rank)
    backward(ctx, grad_y) -> (grad_x_shard, grad_weight_shard, grad_bias, None)
Rank r holds columns r of the weight and the matching slice of the input. It is run on every
rank against nn.Linear on one device; the verdict names the usual mistakes: the all-reduce in
the wrong direction (backward instead of forward), the bias added on every rank before the
sum, an average instead of a sum, a gradient all-reduced that belongs to this rank alone.
"""
from labkit.check.core import checker

__all__ = ["row_parallel"]

_IN, _OUT, _B, _S = 16, 6, 3, 5


def _case(fn):
    import torch
    import torch.distributed as dist
    t, r = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(7)
    w = torch.randn(_OUT, _IN, generator=g, dtype=torch.float64)
    bias = torch.randn(_OUT, generator=g, dtype=torch.float64) + 1.0
    x = torch.randn(_B, _S, _IN, generator=g, dtype=torch.float64)
    dy = torch.randn(_B, _S, _OUT, generator=g, dtype=torch.float64)
    k = _IN // t
    cols = slice(r * k, (r + 1) * k)
    xr, wr, br = (z.clone().requires_grad_() for z in (x, w, bias))
    torch.nn.functional.linear(xr, wr, br).backward(dy)
    xs, ws, bs = (z.clone().requires_grad_() for z in (x[..., cols], w[:, cols], bias))
    summed_gx = xr.grad[..., cols].clone()      # what an all-reduce of the input gradient gives
    dist.all_reduce(summed_gx)
    summed_gw = wr.grad[:, cols].clone()
    dist.all_reduce(summed_gw)
    out = {"ref_y": (x @ w.t() + bias), "summed_gx": summed_gx, "summed_gw": summed_gw, "partial": x[..., cols] @ w[:, cols].t(), "bias": bias,
           "ref_gx": xr.grad[..., cols], "ref_gw": wr.grad[:, cols], "ref_gb": br.grad, "t": t}
    y = fn.apply(xs, ws, bs, None)
    if not isinstance(y, torch.Tensor):
        return {**out, "error": f"forward returned {type(y).__name__}, not a tensor"}
    out["y"] = y.detach().clone()
    if tuple(y.shape) != tuple(out["ref_y"].shape):
        return {**out, "error": f"forward returned shape {tuple(y.shape)}, expected "
                                f"{tuple(out['ref_y'].shape)} (batch, seq, out_features)"}
    try:
        y.backward(dy)
    except RuntimeError as exc:
        msg = str(exc).strip().splitlines()[0]
        return {**out, "error": f"backward failed: {msg} (return one gradient per input of forward, "
                                "each shaped like that input: x shard, weight shard, bias, None)"}
    out.update(gx=xs.grad, gw=ws.grad, gb=bs.grad)
    return out


def _close(a, b) -> bool:
    return a is not None and tuple(a.shape) == tuple(b.shape) and bool((a - b).abs().max() < 1e-8)


def diagnose(res: dict, rank: int) -> str:
    """'' when the rank's results match one device, else the first mistake found."""
    if res.get("error") and "y" not in res:
        return f"rank {rank}: {res['error']}"
    t, y, ref, part, b = res["t"], res["y"], res["ref_y"], res["partial"], res["bias"]
    if res.get("error"):
        return f"rank {rank}: {res['error']}"
    if not _close(y, ref):
        gx = res.get("gx")
        if _close(y, part + b) and gx is not None and _close(gx, res["summed_gx"]):
            return (f"rank {rank}: the all-reduce is in the wrong direction: forward returned this "
                    "rank's partial product, and backward summed the input gradient. A row-parallel "
                    "layer sums the partial outputs in forward (Megatron's g) and needs no "
                    "collective in backward")
        if _close(y, part + b) or _close(y, part):
            return (f"rank {rank}: forward returned this rank's partial product x_r W_r^T without "
                    "summing it over ranks: all-reduce it (dist.all_reduce) before returning")
        if _close(y, ref + (t - 1) * b):
            return (f"rank {rank}: the bias is counted {t} times: it was added on every rank before "
                    "the all-reduce. Sum the partial products first, then add the bias once")
        if _close(y, (ref - b) / t + b) or _close(y, ref / t):
            return (f"rank {rank}: the output is 1/{t} of the right one: the partial products must "
                    "be summed (ReduceOp.SUM), not averaged")
        if _close(y, ref - b):
            return f"rank {rank}: the bias is missing from the output: add it once, after the all-reduce"
        return (f"rank {rank}: forward differs from nn.Linear on one device by "
                f"{(y - ref).abs().max().item():.3g}")
    gx, gw, gb = res["gx"], res["gw"], res["gb"]
    if gx is None:
        return f"rank {rank}: backward returned no gradient for the input shard (first return value)"
    if not _close(gx, res["ref_gx"]):
        if _close(gx, res["summed_gx"]):
            return (f"rank {rank}: the input gradient was all-reduced in backward; in a row-parallel "
                    "layer rank r's input slice gets grad_y @ W_r alone (the sum belongs to forward)")
        return (f"rank {rank}: input gradient differs by {(gx - res['ref_gx']).abs().max().item():.3g}"
                " (expected grad_y @ weight_shard)")
    if gw is None:
        return f"rank {rank}: backward returned no gradient for the weight shard"
    if not _close(gw, res["ref_gw"]):
        if _close(gw, res["summed_gw"]):
            return (f"rank {rank}: the weight gradient was all-reduced; each rank's columns get "
                    "grad_y^T x_r from its own input slice, no collective")
        return (f"rank {rank}: weight gradient differs (shape {tuple(gw.shape)}, expected "
                f"{tuple(res['ref_gw'].shape)}; grad_y^T x_r summed over batch and sequence)")
    if gb is None:
        return f"rank {rank}: backward returned no gradient for the bias (grad_y summed over batch and sequence)"
    if not _close(gb, res["ref_gb"]):
        ratio = (gb.sum() / res["ref_gb"].sum()).item()
        return (f"rank {rank}: bias gradient is {ratio:.3g}x the right one; it is grad_y summed "
                "over batch and sequence, whole on every rank (no division, no all-reduce)")
    return ""


@checker("row_parallel")
def row_parallel(fn, cluster, timeout: float = 60):
    if cluster.world_size < 2 or _IN % cluster.world_size:
        return False, f"needs a cluster of 2 or 4 ranks, this one has {cluster.world_size}"
    results = cluster.run(_case, fn, timeout=timeout)
    for rank, res in enumerate(results):
        why = diagnose(res, rank)
        if why:
            return False, why
    return True, (f"{cluster.world_size} ranks: output and the gradients of input shard, weight "
                  "shard and bias equal nn.Linear on one device")
