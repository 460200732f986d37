"""The collectives of tensor parallelism as autograd functions (Megatron-LM, arXiv 1909.08053).

`f` and `g` are the paper's conjugate pair (section 3, figure 3):
- f (`copy_to_tp`): identity in forward, all-reduce of the gradient in backward. It sits before
  a column-parallel layer: every rank reads the whole input, so each rank's gradient of that
  input is a partial sum.
- g (`reduce_from_tp`): all-reduce in forward, identity in backward. It sits after a
  row-parallel layer: each rank holds a partial sum of the output.
Sequence parallelism (Korthikanti et al., arXiv 2205.05198, section 4.2.2) splits the all-reduce
into its two halves along the sequence: g becomes a reduce-scatter (forward) / all-gather
(backward), f an all-gather (forward) / reduce-scatter (backward). Same bytes on a ring; the
parts between them (layer norms, dropout) then hold 1/t of the sequence.

Tensors here are (batch, seq, hidden); the sequence is split along dim 1.
`reduce_scatter="ring"` uses labkit's ring (bytes as NCCL moves them); "torch" uses
`dist.reduce_scatter_tensor` (`reduce_scatter_single` from torch 2.13, see labkit.comm.compat;
on gloo it moves as many bytes as an all-reduce).
"""
import torch
import torch.distributed as dist

from labkit.comm.compat import all_gather_into_tensor, reduce_scatter_tensor
from labkit.comm.ring import ring_all_gather, ring_reduce_scatter
from labkit.i18n import tr


class _CopyToTP(torch.autograd.Function):
    """f: identity forward, all-reduce backward."""
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""
    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x, group=None):
    return _CopyToTP.apply(x, group)


def reduce_from_tp(x, group=None):
    return _ReduceFromTP.apply(x, group)


def _seq_first(x):
    return x.transpose(0, 1).contiguous()            # (s, b, h): a seq chunk is a flat chunk


def reduce_scatter_seq(x, group=None, impl: str = "ring"):
    """Sum over ranks, keep this rank's 1/t of the sequence: (b, s, h) -> (b, s/t, h)."""
    t = dist.get_world_size(group)
    s = x.shape[1]
    if s % t:
        raise ValueError(tr("sequence length {s} does not divide by the TP degree {t}: sequence "
                            "parallelism gives each rank s / t = {per:.2f} positions; pick s "
                            "divisible by {t}", s=s, t=t, per=s / t))
    flat = _seq_first(x)
    if impl == "ring":
        out = ring_reduce_scatter(flat.view(-1), group).view(s // t, *flat.shape[1:]).clone()
    else:
        out = flat.new_empty(s // t, *flat.shape[1:])
        reduce_scatter_tensor(out, flat, group=group)
    return out.transpose(0, 1)


def all_gather_seq(x, group=None, impl: str = "ring"):
    """Every rank's sequence chunk, concatenated: (b, s/t, h) -> (b, s, h)."""
    t, r = dist.get_world_size(group), dist.get_rank(group)
    part = _seq_first(x)
    full = part.new_zeros(part.shape[0] * t, *part.shape[1:])
    if impl == "ring":
        full[r * part.shape[0]:(r + 1) * part.shape[0]] = part
        ring_all_gather(full.view(-1), group)
    else:
        all_gather_into_tensor(full, part, group=group)
    return full.transpose(0, 1)


class _ScatterSeq(torch.autograd.Function):
    """g for sequence parallelism: reduce-scatter forward, all-gather backward."""
    @staticmethod
    def forward(ctx, x, group, impl):
        ctx.group, ctx.impl = group, impl
        return reduce_scatter_seq(x, group, impl)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_seq(grad, ctx.group, ctx.impl), None, None


class _GatherSeq(torch.autograd.Function):
    """f for sequence parallelism: all-gather forward, reduce-scatter backward."""
    @staticmethod
    def forward(ctx, x, group, impl):
        ctx.group, ctx.impl = group, impl
        return all_gather_seq(x, group, impl)

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_seq(grad, ctx.group, ctx.impl), None, None


def scatter_seq(x, group=None, impl: str = "ring"):
    return _ScatterSeq.apply(x, group, impl)


def gather_seq(x, group=None, impl: str = "ring"):
    return _GatherSeq.apply(x, group, impl)
