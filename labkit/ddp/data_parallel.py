"""Data parallelism from scratch: naive, flat, bucketed with overlap (layer 3).

The notes' DDP loop: each rank reads its own mini-batch, runs forward and backward locally,
all-reduces the gradients (mean over ranks) and takes the same optimizer step, so the
replicas never drift. Simple next to fast, like picotron's DataParallelNaive/DataParallelBucket:

- `NaiveDDP`: one all-reduce per gradient, after backward.
- `FlatDDP`: one all-reduce over every gradient flattened into one buffer, after backward.
- `BucketedDDP`: gradients grouped into buckets of `bucket_cap_mb` in reverse order of use;
  a bucket's all-reduce starts (async) as soon as its last gradient is accumulated, so it
  overlaps the rest of backward (Li et al., "PyTorch Distributed", VLDB 2020, sec. 3.2).

All three, and gradient accumulation without sync on all micro-batches but the last:

    ddp = BucketedDDP(model)                 # broadcasts rank 0's parameters and buffers
    with ddp.no_sync():                      # micro-batches 1..k-1: gradients stay local
        loss_fn(ddp(x1), y1).backward()
    loss_fn(ddp(xk), yk).backward()          # last micro-batch: gradients are synchronised
    ddp.sync_gradients()                     # naive/flat: communicate now; bucketed: wait
    opt.step(); opt.zero_grad()
"""
import contextlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn

MB = 1024 * 1024   # bytes; bucket_cap_mb counts MiB, as torch DDP does


def trainable(module: nn.Module) -> list:
    """(name, parameter) of each distinct parameter that gets a gradient: a tied weight once
    (named_parameters drops duplicates), frozen ones (requires_grad=False) skipped."""
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


class _DataParallel(nn.Module):
    """What every strategy shares: the wrapped module, the initial broadcast, no_sync."""

    def __init__(self, module: nn.Module, process_group=None):
        super().__init__()
        self.module = module
        self.group = process_group
        self.world = dist.get_world_size(process_group)
        self.require_sync = True                    # False inside no_sync()
        self.named = trainable(module)
        self.names = {p: n for n, p in self.named}
        src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
        with torch.no_grad():                       # identical replicas: rank 0's weights
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src, group=process_group)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside only accumulate local gradients (no communication)."""
        old, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = old

    def _grad_or_zeros(self, p):
        # A parameter unused in forward has no gradient: it contributes zeros, so that every
        # rank still calls the same collectives in the same order (else they would hang).
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad


class NaiveDDP(_DataParallel):
    """One blocking all-reduce per parameter after backward, then divide by the world size."""

    def sync_gradients(self) -> None:
        if not self.require_sync:
            return
        for _, p in self.named:
            g = self._grad_or_zeros(p)
            dist.all_reduce(g, group=self.group)
            g.div_(self.world)


class FlatDDP(_DataParallel):
    """Flatten every gradient into one buffer (one per dtype), one all-reduce, copy back."""

    def sync_gradients(self) -> None:
        if not self.require_sync:
            return
        by_dtype = {}
        for _, p in self.named:
            by_dtype.setdefault(p.dtype, []).append(self._grad_or_zeros(p))
        for grads in by_dtype.values():
            flat = torch.cat([g.reshape(-1) for g in grads])       # one copy in
            dist.all_reduce(flat, group=self.group)
            flat.div_(self.world)
            for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
                g.copy_(piece.view_as(g))                          # one copy out


class _Bucket:
    def __init__(self, params: list):
        self.params = params
        self.offsets, n = {}, 0
        for p in params:
            self.offsets[p] = n
            n += p.numel()
        self.buffer = torch.zeros(n, dtype=params[0].dtype, device=params[0].device)
        self.ready = set()                          # params whose gradient is in the buffer
        self.work = None                            # the async all-reduce, once launched

    def slice(self, p):
        o = self.offsets[p]
        return self.buffer[o:o + p.numel()].view_as(p)


class BucketedDDP(_DataParallel):
    """Buckets of `bucket_cap_mb` MiB (the first `first_bucket_cap_mb`) in reverse order of use,
    all-reduced during backward.

    A post-accumulate-grad hook on each parameter copies its finished gradient (a tied
    weight's hook fires once, after both uses are summed) into its bucket; when a bucket is
    full its all-reduce is launched asynchronously, in bucket order on every rank. Only
    `sync_gradients()` waits. The first step records the order in which gradients become
    ready (rank 0's) and rebuilds the buckets in that order, as torch DDP does.

    A parameter unused in forward never gets a gradient, so its bucket would never fill:
    with find_unused_parameters=True it is all-reduced as zeros at `sync_gradients()`,
    otherwise that call raises, naming the parameter.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False, process_group=None,
                 first_bucket_cap_mb: float = 1.0):
        super().__init__(module, process_group)
        self.cap_bytes = bucket_cap_mb * MB
        # torch DDP's default too (dist._DEFAULT_FIRST_BUCKET_BYTES): a small first bucket so
        # that communication starts early in backward; None: every bucket gets bucket_cap_mb
        self.first_cap_bytes = min(first_bucket_cap_mb * MB, self.cap_bytes) \
            if first_bucket_cap_mb is not None else self.cap_bytes
        self.find_unused = find_unused_parameters
        self.trace = None                           # a list to record timings into (timeline)
        self._seen, self._order_fixed = [], False
        self._build([p for _, p in reversed(self.named)])
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad_ready)
                       for _, p in self.named]

    def _build(self, order: list) -> None:
        """Cut `order` into buckets: close one when it reaches the cap or the dtype changes."""
        self.buckets, cur, size = [], [], 0
        for p in order:
            cap = self.first_cap_bytes if not self.buckets else self.cap_bytes
            if cur and (size >= cap or p.dtype != cur[0].dtype):
                self.buckets.append(_Bucket(cur))
                cur, size = [], 0
            cur.append(p)
            size += p.numel() * p.element_size()
        if cur:
            self.buckets.append(_Bucket(cur))
        self.bucket_of = {p: b for b in self.buckets for p in b.params}
        self._next = 0                              # next bucket to launch

    def _on_grad_ready(self, p) -> None:
        if not self.require_sync:
            return
        b = self.bucket_of[p]
        if p in b.ready:
            raise RuntimeError(f"BucketedDDP: the gradient of {self.names[p]!r} was finished twice "
                               "before sync_gradients(). Run the backward passes of all "
                               "micro-batches but the last inside `with ddp.no_sync():`.")
        if not self._order_fixed:
            self._seen.append(p)
        b.slice(p).copy_(p.grad)
        b.ready.add(p)
        if self.trace is not None:
            self.trace.append(("grad", self.names[p], time.perf_counter()))
        self._launch_full()

    def _launch_full(self) -> None:
        # In bucket order, so that every rank issues the same collectives in the same order.
        while self._next < len(self.buckets):
            b = self.buckets[self._next]
            if len(b.ready) < len(b.params):
                return
            b.buffer.div_(self.world)               # average = sum of (g / N)
            b.work = dist.all_reduce(b.buffer, group=self.group, async_op=True)
            if self.trace is not None:
                i, rec = self._next, ["bucket", self._next, time.perf_counter(), None,
                                      b.buffer.numel() * b.buffer.element_size()]
                self.trace.append(rec)
                b.work.get_future().then(lambda _, rec=rec: rec.__setitem__(3, time.perf_counter()))
            self._next += 1

    def _missing(self) -> list:
        return [p for b in self.buckets[self._next:] for p in b.params if p not in b.ready]

    def sync_gradients(self) -> None:
        """Launch what is left (unused parameters), wait for every bucket, copy back."""
        if not self.require_sync:
            return
        missing = self._missing()
        if missing and not self.find_unused:
            for b in self.buckets[:self._next]:
                b.work.wait()
            self._reset()
            names = ", ".join(f"{self.names[p]!r} ({p.numel()} elements)" for p in missing)
            raise RuntimeError(
                f"BucketedDDP on rank {dist.get_rank()}: no gradient arrived for {names} in this "
                "backward pass: it was not used in forward, so its bucket never filled. Pass "
                "BucketedDDP(model, find_unused_parameters=True) to all-reduce zeros for it, or set "
                "requires_grad=False on it, or delete it from the model.")
        for p in missing:                           # unused in forward: contributes zeros
            b = self.bucket_of[p]
            b.slice(p).zero_()
            b.ready.add(p)
        self._launch_full()
        for b in self.buckets:
            b.work.wait()
            for p in b.params:
                if p.grad is None:
                    p.grad = b.slice(p).clone()
                else:
                    p.grad.copy_(b.slice(p))
        if self.trace is not None:
            self.trace.append(("synced", None, time.perf_counter()))
        if not self._order_fixed:
            self._fix_order(self._seen + missing)
        self._reset()

    def _reset(self) -> None:
        for b in self.buckets:
            b.ready.clear()
            b.work = None
        self._next = 0

    def _fix_order(self, seen: list) -> None:
        """Rebuild the buckets in the order gradients became ready on rank 0 (once)."""
        index = {p: i for i, (_, p) in enumerate(self.named)}
        order = [[index[p] for p in seen]]
        dist.broadcast_object_list(order, src=dist.get_global_rank(self.group, 0)
                                   if self.group is not None else 0, group=self.group)
        order = [self.named[i][1] for i in order[0]]
        if [id(p) for p in order] != [id(p) for b in self.buckets for p in b.params]:
            self._build(order)
        self._order_fixed, self._seen = True, []

    def bucket_sizes(self) -> list:
        """Bytes of each bucket, in launch order."""
        return [b.buffer.numel() * b.buffer.element_size() for b in self.buckets]


STRATEGIES = {"naive": NaiveDDP, "flat": FlatDDP, "bucketed": BucketedDDP}
