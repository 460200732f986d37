"""A full sequence split into this rank's part and put back, and the checks every rank agrees on
before attention (shapes, options), so a bad input gives the same clear error on every rank
instead of a hang in the ring.

    part = shard_sequence(x, dim=2, layout="zigzag")     # this rank's positions of x
    full = gather_sequence(part, dim=2, layout="zigzag") # every rank's parts, in global order
"""
import torch
import torch.distributed as dist

from labkit.cp import layout as L
from labkit.i18n import N_, tr

_METHODS = ("ring", "allgather")


def group_info(group=None):
    """(this rank in the group, group size, global rank of the next one, of the previous one)."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    glob = (lambda i: i) if group is None else (lambda i: dist.get_global_rank(group, i))
    return r, n, glob((r + 1) % n), glob((r - 1) % n)


def shard_sequence(x: torch.Tensor, dim: int, *, group=None, layout: str = "contiguous"):
    """This rank's part of the full tensor x along `dim` (a copy), in the given layout."""
    r, n = dist.get_rank(group), dist.get_world_size(group)
    parts = [x.narrow(dim, a, b - a) for a, b in L.ranges(x.shape[dim], n, r, layout)]
    return torch.cat(parts, dim=dim).contiguous()


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, part, dim, group, layout):
        r, n = dist.get_rank(group), dist.get_world_size(group)
        lens = torch.zeros(n, dtype=torch.int64, device=part.device)
        lens[r] = part.shape[dim]
        dist.all_reduce(lens, group=group)
        seq = int(lens.sum())
        longest = int(lens.max())
        pad = list(part.shape)
        pad[dim] = longest
        buf = part.new_zeros(pad)
        buf.narrow(dim, 0, part.shape[dim]).copy_(part)
        bufs = [torch.empty_like(buf) for _ in range(n)]
        dist.all_gather(bufs, buf.contiguous(), group=group)
        shape = list(part.shape)
        shape[dim] = seq
        full = part.new_empty(shape)
        for src in range(n):
            off = 0
            for a, b in L.ranges(seq, n, src, layout):
                full.narrow(dim, a, b - a).copy_(bufs[src].narrow(dim, off, b - a))
                off += b - a
        ctx.dim, ctx.group, ctx.layout = dim, group, layout
        return full

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)       # every rank's use of the full tensor
        return shard_sequence(grad, ctx.dim, group=ctx.group, layout=ctx.layout), None, None, None


def gather_sequence(part: torch.Tensor, dim: int, *, group=None, layout: str = "contiguous"):
    """The full tensor from every rank's part (differentiable; parts may differ in length by
    the layout's rounding)."""
    return _Gather.apply(part, dim, group, layout)


_FIELDS = ("batch", N_("query heads"), N_("query positions"), N_("head size"),
           N_("K batch"), N_("K heads"), N_("K positions"), N_("K head size"),
           N_("V batch"), N_("V heads"), N_("V positions"), N_("V head size"), "causal", "method", "layout")


def agree(q, k, v, *, group=None, causal: bool, method: str, layout: str) -> int:
    """Check q, k, v and the options on every rank against rank 0's and against each other;
    return the full sequence length. Raises the same ValueError on every rank."""
    r, n = dist.get_rank(group), dist.get_world_size(group)
    mine = [*(q.shape if q.dim() == 4 else (-1,) * 4), *(k.shape if k.dim() == 4 else (-1,) * 4),
            *(v.shape if v.dim() == 4 else (-1,) * 4), int(bool(causal)),
            _METHODS.index(method) if method in _METHODS else -1,
            L.LAYOUTS.index(layout) if layout in L.LAYOUTS else -1]
    table = torch.zeros(n, len(mine), dtype=torch.int64, device=q.device)
    table[r] = torch.tensor(mine, dtype=torch.int64, device=q.device)
    dist.all_reduce(table, group=group)
    return check_rows(table.tolist(), r, method=method, layout=layout)


def check_rows(rows: list, rank: int, *, method: str, layout: str) -> int:
    """`agree`'s checks on the gathered table (pure): row j holds rank j's q, k, v shapes (-1 for
    a tensor that is not 4-D), causal, method and layout; `rank` is the caller's. Returns the full
    sequence length or raises a ValueError naming the rank at fault and what to do."""
    r, n = rank, len(rows)
    if method not in _METHODS:
        raise ValueError(tr("rank {r}: method={method!r} is not one of {methods}", r=r, method=method,
                            methods=_METHODS))
    if layout not in L.LAYOUTS:
        raise ValueError(tr("rank {r}: layout={layout!r} is not one of {layouts}", r=r, layout=layout,
                            layouts=L.LAYOUTS))
    for j, row in enumerate(rows):
        if -1 in row[:12]:
            raise ValueError(tr("rank {j}: q, k and v must be 4-D (batch, heads, sequence, head_dim); got "
                                "shapes {q}, {k}, {v} (-1: not 4-D)", j=j, q=row[0:4], k=row[4:8], v=row[8:12]))
        for i, (a, b) in enumerate(zip(row, rows[0])):
            if a != b and i not in (2, 6, 10):
                raise ValueError(tr("rank {j} has {field} = {a} but rank 0 has {b}: every rank must call "
                                    "attention with the same shapes and options; only the number of "
                                    "positions differs (its part of the sequence)", j=j, field=tr(_FIELDS[i]),
                                    a=a, b=b))
        if not row[2] == row[6] == row[10]:
            raise ValueError(tr("rank {j}: q, k and v hold {q}, {k} and {v} positions; give each rank the "
                                "same positions of q, k and v (shard_sequence)", j=j, q=row[2], k=row[6],
                                v=row[10]))
        if row[8:10] != row[4:6] or row[7] != row[3] or row[11] != row[3]:
            raise ValueError(tr("rank {j}: k {k} and v {v} must match each other and q's head size {d}",
                                j=j, k=row[4:8], v=row[8:12], d=row[3]))
        if row[1] % row[5]:
            raise ValueError(tr("rank {j}: {hq} query heads do not divide into groups of the {hkv} K/V heads "
                                "(grouped-query attention needs a multiple)", j=j, hq=row[1], hkv=row[5]))
    seq = sum(row[2] for row in rows)
    try:
        L.ranges(seq, n, 0, layout)                   # raises if the sequence is too short
    except ValueError as exc:
        raise ValueError(tr("rank {rank}: {error}", rank=r, error=exc)) from None
    for j, row in enumerate(rows):
        want = L.local_len(seq, n, j, layout)
        if row[2] != want:
            raise ValueError(tr("rank {j} holds {have} positions but the {layout} layout of {seq} positions "
                                "on {n} ranks gives it {want}: split the sequence with "
                                "labkit.cp.shard_sequence(x, dim=2, layout={layout!r})", j=j, have=row[2],
                                layout=layout, seq=seq, n=n, want=want))
    return seq
