"""All-to-all with uneven splits: torch's, one written by hand on send/recv, and autograd.

    out = all_to_all(x, out_splits, in_splits, group, impl="torch")   # differentiable
    all_to_all_p2p(out, x, out_splits, in_splits, group)              # by hand, in place

Rank r sends rows x[in_offsets[j] : + in_splits[j]] to rank j and receives out_splits[j] rows
from rank j, stored in rank order. Its backward is the same exchange with the splits swapped.

The hand-written one is the pairwise schedule: in step s = 1 .. n-1 rank r sends to r+s and
receives from r-s (mod n), both posted before either is waited on (a blocking send first on
every rank would wait forever for a receive nobody has posted yet). Its own block is copied.
Empty blocks are not sent (both sides know the size, so both skip). Payload bytes and messages
go to `labkit.comm.traffic` as the ring's do. gloo in torch 2.13 implements
`all_to_all_single` with uneven and zero splits on CPU (tests/moe/test_moe_parallel.py runs both).
"""
import torch
import torch.distributed as dist

from labkit.comm.ring import exchange
from labkit.i18n import tr

IMPLS = ("torch", "p2p")


def offsets(splits) -> list:
    out, acc = [], 0
    for s in splits:
        out.append(acc)
        acc += s
    return out


def all_to_all_p2p(out: torch.Tensor, x: torch.Tensor, out_splits, in_splits, group=None) -> torch.Tensor:
    n, r = dist.get_world_size(group), dist.get_rank(group)
    glob = (lambda g: g) if group is None else (lambda g: dist.get_global_rank(group, g))
    so, ro = offsets(in_splits), offsets(out_splits)
    out[ro[r]:ro[r] + out_splits[r]] = x[so[r]:so[r] + in_splits[r]]
    for s in range(1, n):
        to, frm = (r + s) % n, (r - s) % n
        exchange(x[so[to]:so[to] + in_splits[to]].contiguous(), glob(to),
                 out[ro[frm]:ro[frm] + out_splits[frm]], glob(frm))
    return out


def _exchange(x, out_splits, in_splits, group, impl):
    x = x.contiguous()
    out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
    if impl == "p2p":
        return all_to_all_p2p(out, x, out_splits, in_splits, group)
    dist.all_to_all_single(out, x, out_splits, in_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group, impl):
        ctx.args = (out_splits, in_splits, group, impl)
        return _exchange(x, out_splits, in_splits, group, impl)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits, group, impl = ctx.args
        return _exchange(grad, in_splits, out_splits, group, impl), None, None, None, None


def all_to_all(x: torch.Tensor, out_splits, in_splits, group=None, impl: str = "torch") -> torch.Tensor:
    """Differentiable all-to-all of the rows of x (see the module's docstring)."""
    if impl not in IMPLS:
        raise ValueError(tr("impl must be one of {impls}, got {impl!r}", impls=IMPLS, impl=impl))
    return _AllToAll.apply(x, [int(s) for s in out_splits], [int(s) for s in in_splits], group, impl)


def exchange_counts(per_expert: torch.Tensor, group=None, impl: str = "torch") -> torch.Tensor:
    """Split sizes first: rank r holds per_expert (E,), how many token copies it sends to each
    expert; returns (n, E/n): row j = how many rank j sends to each of this rank's experts."""
    n = dist.get_world_size(group)
    each = [per_expert.numel() // n] * n
    return _exchange(per_expert, each, each, group, impl).view(n, -1)
