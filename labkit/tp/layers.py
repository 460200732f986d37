"""Column- and row-parallel linear layers (Megatron-LM, arXiv 1909.08053, section 3).

A linear layer Y = X A^T + b (torch stores A as [out, in]):
- column parallel: rank r keeps rows r of A (its 1/t of the outputs). Its input goes through
  f (identity forward, all-reduce backward); its output stays split, one slice per rank.
- row parallel: rank r keeps columns r of A (its 1/t of the inputs) and takes the split output
  of a column-parallel layer as input. Each rank's product is a partial sum, summed by g
  (all-reduce forward, identity backward); the bias is added once, after the sum.
An MLP is column then row: one all-reduce forward (g) and one backward (f).

Both are built from a single-device nn.Linear (`from_linear`), so a test can compare them with it.

With sequence parallelism the column-parallel layer's input arrives as this rank's s/t positions
and is all-gathered first. `_GatherLinear` does the all-gather and the matmul in one autograd
function that saves only the local shard (as Megatron-LM's sequence-parallel linear): backward
all-gathers the input again for the weight gradient, and reduce-scatters the input gradient.
One more all-gather per column-parallel layer in backward buys activation memory of s/t:
what Korthikanti et al.'s formula (arXiv 2205.05198, eq. 3) assumes. Saving the gathered input
instead (all-gather, then F.linear) would keep the whole sequence for backward.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.i18n import tr
from labkit.tp import comms


def shard_rows(n: int, t: int, r: int, what: str) -> slice:
    """Rank r's slice of n rows split t ways; a clear error when t does not divide n."""
    if n % t:
        raise ValueError(tr("{what} ({n}) does not divide by the tensor-parallel degree ({t}): "
                            "{n} / {t} = {per:.2f} per rank. Tensor parallelism splits it into "
                            "equal parts: pick a TP degree among the divisors of {n}, or pad it",
                            what=what, n=n, t=t, per=n / t))
    k = n // t
    return slice(r * k, (r + 1) * k)


class _GatherLinear(torch.autograd.Function):
    """y = all_gather_seq(x) @ W^T + b, keeping x (this rank's s/t positions), not the gathered
    input, for backward."""
    @staticmethod
    def forward(ctx, x, weight, bias, group, impl):
        ctx.group, ctx.impl, ctx.has_bias = group, impl, bias is not None
        ctx.save_for_backward(x, weight)
        return F.linear(comms.all_gather_seq(x, group, impl), weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        full = comms.all_gather_seq(x, ctx.group, ctx.impl)       # again: the extra all-gather
        grad_x = comms.reduce_scatter_seq(grad @ weight, ctx.group, ctx.impl)
        g2 = grad.reshape(-1, grad.shape[-1])
        grad_w = g2.t() @ full.reshape(-1, full.shape[-1])
        grad_b = g2.sum(0) if ctx.has_bias else None
        return grad_x, grad_w, grad_b, None, None


def _tp(group):
    return dist.get_world_size(group), dist.get_rank(group)


class ColumnParallelLinear(nn.Module):
    """Rank r holds rows r of the weight (and of the bias). `parts` = 3 for a fused QKV weight:
    each of q, k, v is split, so rank r gets the same heads of all three."""

    def __init__(self, linear: nn.Linear, group=None, parts: int = 1, sequence_parallel=False,
                 impl: str = "ring", name: str = "weight"):
        super().__init__()
        t, r = _tp(group)
        self.group, self.sp, self.impl = group, sequence_parallel, impl
        out = linear.out_features // parts
        mine, dev = shard_rows(out, t, r, tr("{name} outputs", name=tr(name))), linear.weight.device
        rows = torch.cat([torch.arange(i * out, (i + 1) * out, device=dev)[mine] for i in range(parts)])
        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())
        self.bias = nn.Parameter(linear.bias.detach()[rows].clone()) if linear.bias is not None else None
        self.rows = rows                            # which rows of the full weight this rank holds

    def forward(self, x):
        if self.sp:
            return _GatherLinear.apply(x, self.weight, self.bias, self.group, self.impl)
        return F.linear(comms.copy_to_tp(x, self.group), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Rank r holds columns r of the weight; the bias is whole and added after the sum."""

    def __init__(self, linear: nn.Linear, group=None, sequence_parallel=False, impl: str = "ring",
                 name: str = "weight"):
        super().__init__()
        t, r = _tp(group)
        self.group, self.sp, self.impl = group, sequence_parallel, impl
        self.cols = shard_rows(linear.in_features, t, r, tr("{name} inputs", name=tr(name)))
        self.weight = nn.Parameter(linear.weight.detach()[:, self.cols].clone())
        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None

    def forward(self, x):
        partial = F.linear(x, self.weight)
        y = comms.scatter_seq(partial, self.group, self.impl) if self.sp \
            else comms.reduce_from_tp(partial, self.group)
        return y if self.bias is None else y + self.bias


def replicated(tp_stage: nn.Module) -> dict:
    """{id(param): True} for the parameters every TP rank holds whole (layer norms, row-parallel
    biases, embeddings and heads left unsplit), False for the split ones (Megatron-LM's
    param_is_not_tensor_parallel_duplicate, inverted)."""
    split = set()
    for m in tp_stage.modules():
        if isinstance(m, ColumnParallelLinear):
            split |= {id(p) for p in m.parameters()}
        elif isinstance(m, RowParallelLinear):
            split.add(id(m.weight))
    return {id(p): id(p) not in split for p in tp_stage.parameters()}


def mark_replicated(tp_stage: nn.Module) -> None:
    """Flag the parameters every TP rank holds whole (`replicated`): `p.tp_replicated`, so a
    norm over the TP group counts them on one rank only."""
    whole = replicated(tp_stage)
    for p in tp_stage.parameters():
        p.tp_replicated = whole[id(p)]
