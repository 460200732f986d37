"""What every DDP strategy shares (layer 3): the wrapped module, the initial broadcast of rank
0's parameters and buffers, buffers broadcast before each forward, no_sync. `data_parallel.py`
(naive, flat) and `bucketed.py` (bucketed with overlap) both build on `_DataParallel` here.
"""
import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

MB = 1024 * 1024   # bytes; bucket_cap_mb counts MiB, as torch DDP does


def trainable(module: nn.Module) -> list:
    """(name, parameter) of each distinct parameter that gets a gradient: a tied weight once
    (named_parameters drops duplicates), frozen ones (requires_grad=False) skipped."""
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


class _DataParallel(nn.Module):
    """What every strategy shares: the wrapped module, the initial broadcast, buffers
    broadcast before each forward, no_sync."""

    def __init__(self, module: nn.Module, process_group=None, broadcast_buffers: bool = True):
        super().__init__()
        self.module = module
        self.group = process_group
        self.world = dist.get_world_size(process_group)
        self.src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
        self.broadcast_buffers = broadcast_buffers
        self.require_sync = True                    # False inside no_sync()
        self.named = trainable(module)
        self.names = {p: n for n, p in self.named}
        self._module_buffers = list(module.buffers())
        with torch.no_grad():                       # identical replicas: rank 0's weights
            for t in [*module.parameters(), *self._module_buffers]:
                dist.broadcast(t.data, self.src, group=process_group)

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers and self._module_buffers:
            self._sync_buffers()
        return self.module(*args, **kwargs)

    @torch.no_grad()
    def _sync_buffers(self) -> None:
        """Rank 0's buffers (BatchNorm's running statistics, ...) on every rank, one broadcast
        per dtype, as torch DDP does before each forward."""
        by_dtype = {}
        for b in self._module_buffers:
            by_dtype.setdefault(b.dtype, []).append(b)
        for bufs in by_dtype.values():
            flat = _flatten_dense_tensors(bufs)
            dist.broadcast(flat, self.src, group=self.group)
            for b, new in zip(bufs, _unflatten_dense_tensors(flat, bufs)):
                b.copy_(new)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside only accumulate local gradients (no communication)."""
        old, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = old
