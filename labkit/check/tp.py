"""Checker for notebook 06 (tensor parallelism): the learner's row-parallel linear.

`row_parallel(Fn)`: Fn is a torch.autograd.Function with
    forward(ctx, x_shard, weight_shard, bias, group) -> y        (the whole output, every rank)
    backward(ctx, grad_y) -> (grad_x_shard, grad_weight_shard, grad_bias, None)
Rank r holds columns r of the weight and the matching slice of the input. It is run on every
rank against nn.Linear on one device; the verdict names the usual mistakes: the all-reduce in
the wrong direction (backward instead of forward), the bias added on every rank before the
sum, an average instead of a sum, a result too large or too small by a factor (named: t, 1/t),
a gradient all-reduced that belongs to this rank alone, and ranks that call different
collectives (named: what each rank called).

That last one would never reach gloo: during the learner's forward and backward every
`torch.distributed` collective is first announced through the store (`Agreed`, in tp_agreed.py),
and each rank compares what the others are about to call at the same position. A difference is
reported on every rank instead of a hang or an aborted process. A collective imported by name
(`from torch.distributed import all_reduce`, under any alias) is announced too: the names in the
learner's forward's and backward's module that refer to a collective are swapped as well.
"""
from labkit.check.core import checker
from labkit.check.guard import HANG_LIMIT_S
from labkit.check.tp_agreed import Agreed, Mismatch
from labkit.i18n import tr

__all__ = ["row_parallel"]

_IN, _OUT, _B, _S = 16, 6, 3, 5
def _case(fn, token: str = "", timeout: float = 30):
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
    try:
        with Agreed(token, "forward", timeout, fn):
            y = fn.apply(xs, ws, bs, None)
    except Mismatch as exc:
        return {**out, "error": str(exc)}
    if not isinstance(y, torch.Tensor):
        return {**out, "error": tr("forward returned {kind}, not a tensor", kind=type(y).__name__)}
    out["y"] = y.detach().clone()
    if tuple(y.shape) != tuple(out["ref_y"].shape):
        return {**out, "error": tr("forward returned shape {got}, expected {want} (batch, seq, "
                                   "out_features)", got=tuple(y.shape),
                                   want=tuple(out["ref_y"].shape))}
    try:
        with Agreed(token, "backward", timeout, fn):
            y.backward(dy)
    except Mismatch as exc:
        return {**out, "error": str(exc)}
    except RuntimeError as exc:
        msg = str(exc).strip().splitlines()[0]
        return {**out, "error": tr("backward failed: {msg} (return one gradient per input of "
                                   "forward, each shaped like that input: x shard, weight shard, "
                                   "bias, None)", msg=msg)}
    out.update(gx=xs.grad, gw=ws.grad, gb=bs.grad)
    return out


def _close(a, b) -> bool:
    return a is not None and tuple(a.shape) == tuple(b.shape) and bool((a - b).abs().max() < 1e-8)


def _scale(a, b):
    """c when a = c * b (c not 1, one number for the whole tensor), else None."""
    if a is None or tuple(a.shape) != tuple(b.shape) or not bool(b.abs().max() > 0):
        return None
    c = ((a * b).sum() / (b * b).sum()).item()
    return c if abs(c - 1) > 1e-6 and _close(a, c * b) else None


def _factor(c: float, t: int) -> str:
    """'4x the right one (4 = the number of ranks: ...)', '1/4 of the right one (...)'."""
    if abs(c - t) < 1e-6:
        return tr("{t}x the right one ({t} = the number of ranks: summed over the ranks once too "
                  "often, or multiplied by the world size)", t=t)
    if abs(c - 1 / t) < 1e-6:
        return tr("{c:.3g}x the right one (1/{t}, one over the number of ranks: divided by the "
                  "world size, or averaged where a sum is needed)", c=c, t=t)
    return tr("{c:.3g}x the right one", c=c)


def diagnose(res: dict, rank: int) -> str:
    """'' when the rank's results match one device, else the first mistake found."""
    if res.get("error"):
        return tr("rank {rank}: {error}", rank=rank, error=res["error"])
    t, y, ref, part, b = res["t"], res["y"], res["ref_y"], res["partial"], res["bias"]
    if not _close(y, ref):
        gx = res.get("gx")
        if _close(y, part + b) and gx is not None and _close(gx, res["summed_gx"]):
            return tr("rank {rank}: the all-reduce is in the wrong direction: forward returned "
                      "this rank's partial product, and backward summed the input gradient. A "
                      "row-parallel layer sums the partial outputs in forward (Megatron's g) and "
                      "needs no collective in backward", rank=rank)
        if _close(y, part + b) or _close(y, part):
            return tr("rank {rank}: forward returned this rank's partial product x_r W_r^T "
                      "without summing it over ranks: all-reduce it (dist.all_reduce) before "
                      "returning", rank=rank)
        if _close(y, ref + (t - 1) * b):
            return tr("rank {rank}: the bias is counted {t} times: it was added on every rank "
                      "before the all-reduce. Sum the partial products first, then add the bias "
                      "once", rank=rank, t=t)
        if _close(y, (ref - b) / t + b) or _close(y, ref / t):
            return tr("rank {rank}: the output is 1/{t} of the right one: the partial products "
                      "must be summed (ReduceOp.SUM), not averaged", rank=rank, t=t)
        if _close(y, ref - b):
            return tr("rank {rank}: the bias is missing from the output: add it once, after the "
                      "all-reduce", rank=rank)
        c, summed = _scale(y, ref), _scale(y - b, ref - b)
        if c or summed:
            what = tr("the output") if c else \
                tr("the summed product (before the bias, which is right)")
            return tr("rank {rank}: {what} is {factor}. Sum the partial products with one "
                      "all-reduce (ReduceOp.SUM), then add the bias once", rank=rank, what=what,
                      factor=_factor(c or summed, t))
        return tr("rank {rank}: forward differs from nn.Linear on one device by {gap:.3g}",
                  rank=rank, gap=(y - ref).abs().max().item())
    gx, gw, gb = res["gx"], res["gw"], res["gb"]
    if gx is None:
        return tr("rank {rank}: backward returned no gradient for the input shard (first return "
                  "value)", rank=rank)
    if not _close(gx, res["ref_gx"]):
        if _close(gx, res["summed_gx"]):
            return tr("rank {rank}: the input gradient was all-reduced in backward; in a "
                      "row-parallel layer rank r's input slice gets grad_y @ W_r alone (the sum "
                      "belongs to forward)", rank=rank)
        c = _scale(gx, res["ref_gx"])
        if c:
            return tr("rank {rank}: the input gradient is {factor}. Rank r's input slice gets "
                      "grad_y @ W_r as it is: no collective, no division", rank=rank,
                      factor=_factor(c, t))
        return tr("rank {rank}: input gradient differs by {gap:.3g} (expected grad_y @ "
                  "weight_shard)", rank=rank, gap=(gx - res["ref_gx"]).abs().max().item())
    if gw is None:
        return tr("rank {rank}: backward returned no gradient for the weight shard", rank=rank)
    if not _close(gw, res["ref_gw"]):
        if _close(gw, res["summed_gw"]):
            return tr("rank {rank}: the weight gradient was all-reduced; each rank's columns get "
                      "grad_y^T x_r from its own input slice, no collective", rank=rank)
        c = _scale(gw, res["ref_gw"])
        if c:
            return tr("rank {rank}: the weight gradient is {factor}. Each rank's columns get "
                      "grad_y^T x_r from its own input slice: no collective, no division",
                      rank=rank, factor=_factor(c, t))
        return tr("rank {rank}: weight gradient differs (shape {got}, expected {want}; grad_y^T "
                  "x_r summed over batch and sequence)", rank=rank, got=tuple(gw.shape),
                  want=tuple(res["ref_gw"].shape))
    if gb is None:
        return tr("rank {rank}: backward returned no gradient for the bias (grad_y summed over "
                  "batch and sequence)", rank=rank)
    if not _close(gb, res["ref_gb"]):
        c = _scale(gb, res["ref_gb"])
        ratio = _factor(c, t) if c else \
            tr("{c:.3g}x the right one", c=(gb.sum() / res["ref_gb"].sum()).item())
        return tr("rank {rank}: bias gradient is {ratio}; it is grad_y summed over batch and "
                  "sequence, whole on every rank (no division, no all-reduce)", rank=rank,
                  ratio=ratio)
    return ""


@checker("row_parallel")
def row_parallel(fn, cluster, timeout: float = HANG_LIMIT_S):
    if cluster.world_size < 2 or _IN % cluster.world_size:
        return False, tr("needs a cluster of 2 or 4 ranks, this one has {n}", n=cluster.world_size)
    import uuid
    results = cluster.run(_case, fn, uuid.uuid4().hex[:12], timeout / 2, timeout=timeout)
    for rank, res in enumerate(results):
        why = diagnose(res, rank)
        if why:
            return False, why
    return True, tr("{n} ranks: output and the gradients of input shard, weight shard and bias "
                    "equal nn.Linear on one device", n=cluster.world_size)
