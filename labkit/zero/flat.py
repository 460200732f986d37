"""Flat buffers and the collectives every ZeRO stage shares (layer 3, runs inside a rank).

A `Flat` lays a list of parameters end to end in one buffer whose length is padded up to a
multiple of the world size N, so that it splits into N equal shards: rank r owns elements
[r * L/N, (r+1) * L/N). The padding (at most N-1 elements per buffer) is real memory that the
formulas do not count; `Flat.padding` names it so measurements can account for every byte.

Collectives, chosen so the bytes on the wire are NCCL's on any backend:
- reduce-scatter: on gloo labkit's ring (`labkit.comm.ring_reduce_scatter`, (N-1)/N of the
  buffer per rank); torch's gloo `reduce_scatter_tensor` reduces the whole buffer and keeps a
  slice, moving as much as an all-reduce (1.5x the buffer at N=4). On NCCL torch's own.
- all-gather: torch's `all_gather_into_tensor` ((N-1)/N on gloo and NCCL).
- all-reduce (stage 0, the DDP baseline): labkit's ring on gloo, torch's on NCCL.
"""
import torch
import torch.distributed as dist

from labkit.comm import link
from labkit.comm.compat import all_gather_into_tensor, reduce_scatter_tensor
from labkit.comm.ring import ring_reduce_scatter
from labkit.comm.ring_fast import ring_all_reduce


def padded(numel: int, world: int) -> int:
    """numel rounded up to a multiple of world."""
    return -(-numel // world) * world


class Flat:
    """Parameters laid end to end: offsets, padding and this rank's shard bounds.

    entries: [(name, offset, numel, shape)] in buffer order; the buffer itself is held by
    the stage that uses the layout (a full copy, a shard, or both)."""

    def __init__(self, named_params, world: int, rank: int):
        self.entries, off = [], 0
        for name, p in named_params:
            self.entries.append((name, off, p.numel(), tuple(p.shape)))
            off += p.numel()
        self.numel = off
        self.size = padded(off, world)
        self.shard = self.size // world
        self.lo, self.hi = rank * self.shard, (rank + 1) * self.shard
        self.world, self.rank = world, rank

    @property
    def padding(self) -> int:
        """Padding elements in the full buffer (the same on every rank)."""
        return self.size - self.numel

    @property
    def shard_padding(self) -> int:
        """Padding elements inside this rank's shard (the last ranks hold it)."""
        return self.shard - max(0, min(self.hi, self.numel) - self.lo)

    def flatten(self, tensors: dict, dtype=None, out=None) -> torch.Tensor:
        """The full padded buffer from {name: tensor} (padding zero)."""
        first = next(iter(tensors.values()))
        out = out if out is not None else torch.zeros(self.size, dtype=dtype or first.dtype,
                                                      device=first.device)
        for name, off, n, _ in self.entries:
            out[off:off + n].copy_(tensors[name].reshape(-1))
        if self.padding:
            out[self.numel:].zero_()
        return out

    def views(self, buf: torch.Tensor) -> dict:
        """{name: view of buf shaped like the parameter}."""
        return {name: buf[off:off + n].view(shape) for name, off, n, shape in self.entries}


def is_gloo(group=None) -> bool:
    return dist.get_backend(group) == "gloo"


def reduce_scatter(flat: torch.Tensor, group=None) -> torch.Tensor:
    """Sum `flat` (length divisible by N) over ranks; return this rank's shard of the sum.
    On gloo the ring works in place and the shard is a view into `flat`."""
    if is_gloo(group):
        return ring_reduce_scatter(flat, group)
    n = dist.get_world_size(group)
    out = torch.empty(flat.numel() // n, dtype=flat.dtype, device=flat.device)
    reduce_scatter_tensor(out, flat, group=group)
    return out


def all_gather(flat: torch.Tensor, shard: torch.Tensor, group=None, async_op: bool = False):
    """Fill `flat` with every rank's `shard` (rank r's at [r*L/N, (r+1)*L/N)). Inside
    `labkit.comm.link.throttled` the rank first waits for a ring's sends on the slow link:
    N-1 messages of one shard each (gloo's own all-gather cannot be paced from here)."""
    n = dist.get_world_size(group)
    link.charge((n - 1) * shard.numel() * shard.element_size(), messages=n - 1)
    return all_gather_into_tensor(flat, shard.contiguous(), group=group, async_op=async_op)


def all_reduce(flat: torch.Tensor, group=None) -> torch.Tensor:
    """Sum over ranks in place (stage 0)."""
    if is_gloo(group):
        return ring_all_reduce(flat, group)
    dist.all_reduce(flat, group=group)
    return flat
