"""Data parallelism from scratch: naive, flat, bucketed with overlap (layer 3).

The notes' DDP loop: each rank reads its own mini-batch, runs forward and backward locally,
all-reduces the gradients (mean over ranks) and takes the same optimizer step, so the
replicas never drift. Simple next to fast, like picotron's DataParallelNaive/DataParallelBucket:

- `NaiveDDP`: one all-reduce per gradient, after backward.
- `FlatDDP`: one all-reduce over every gradient flattened into one buffer, after backward.
- `BucketedDDP` (bucketed.py): gradients grouped into buckets of `bucket_cap_mb` in reverse
  order of use; a bucket's all-reduce starts (async) as soon as its last gradient is
  accumulated, so it overlaps the rest of backward (Li et al., "PyTorch Distributed", VLDB
  2020, sec. 3.2), with torch DDP's bucket layout, options and behaviour.

All three, and gradient accumulation without sync on all micro-batches but the last:

    ddp = BucketedDDP(model)                 # broadcasts rank 0's parameters and buffers
    with ddp.no_sync():                      # micro-batches 1..k-1: gradients stay local
        loss_fn(ddp(x1), y1).backward()
    loss_fn(ddp(xk), yk).backward()          # last micro-batch: gradients are synchronised
    ddp.sync_gradients()                     # naive/flat: communicate now; bucketed: wait
    opt.step(); opt.zero_grad()

As torch's DDP: every forward first broadcasts rank 0's buffers (`broadcast_buffers=True`),
and a parameter that no rank used keeps `.grad` None, so that an optimizer skips it (AdamW's
weight decay would otherwise move it); one used on some ranks only gets zeros from the others.
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


class NaiveDDP(_DataParallel):
    """One blocking all-reduce per parameter after backward, then divide by the world size.
    First one small all-reduce of which parameters have a gradient on each rank: a parameter
    that no rank used is skipped (its .grad stays None); one used elsewhere sends zeros."""

    def sync_gradients(self) -> None:
        if not self.require_sync:
            return
        used = torch.tensor([p.grad is not None for _, p in self.named], dtype=torch.int32,
                            device=self.named[0][1].device if self.named else None)  # NCCL: on the GPU
        dist.all_reduce(used, group=self.group)
        for (_, p), anyone in zip(self.named, used.tolist()):
            if not anyone:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=self.group)
            p.grad.div_(self.world)


class FlatDDP(_DataParallel):
    """Flatten every gradient into one buffer (one per dtype), one all-reduce, copy back.
    The buffer ends with one flag per parameter (1 where this rank has its gradient), so the
    same all-reduce also says which parameters no rank used: those keep .grad None."""

    def sync_gradients(self) -> None:
        if not self.require_sync:
            return
        by_dtype = {}
        for _, p in self.named:
            by_dtype.setdefault(p.dtype, []).append(p)
        for params in by_dtype.values():
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                              for p in params] +                       # one copy in
                             [torch.tensor([float(p.grad is not None) for p in params],
                                           dtype=params[0].dtype, device=params[0].device)])
            dist.all_reduce(flat, group=self.group)
            flat.div_(self.world)
            *pieces, used = flat.split([p.numel() for p in params] + [len(params)])
            for p, piece, anyone in zip(params, pieces, used.tolist()):
                if not anyone:
                    continue                                           # no rank used it
                if p.grad is None:
                    p.grad = piece.view_as(p).clone()
                else:
                    p.grad.copy_(piece.view_as(p))                     # one copy out


from labkit.ddp.bucketed import BucketedDDP  # noqa: E402 - builds on _DataParallel above

STRATEGIES = {"naive": NaiveDDP, "flat": FlatDDP, "bucketed": BucketedDDP}
