"""Bucketed DDP, the core (layer 3): gradients in buckets, each all-reduced during backward.

A hook on each parameter fires when its gradient is finished: the gradient / N goes into its
slice of a bucket, and once a bucket holds all its gradients its all-reduce is launched
asynchronously while backward computes the next layers. Buckets launch in bucket order on every
rank (the same collectives in the same order everywhere); `sync_gradients()` waits and sets
the averaged `.grad`. bucketed.py's BucketedDDP adds what torch's DDP does beyond the idea: the
first backward in one bucket and the rebuild in gradient-ready order, find_unused_parameters,
gradient_as_bucket_view, unwrapping a module wrapped again, and the timeline's stamps.
"""
import torch
import torch.distributed as dist

from labkit.ddp.base import _DataParallel
from labkit.i18n import tr


def assign_buckets(params: list, limits: list, sort: bool = False) -> list:
    """Cut `params` (in this order) into buckets, as torch's compute_bucket_assignment_by_size:
    one open bucket per dtype and device, closed once it holds >= its limit (limits[0] for the
    first of a dtype, then the next, the last repeated). Closed buckets in closing order, then
    the open ones; with `sort`, by the position of their first parameter (torch's first cut)."""
    pos = {id(p): i for i, p in enumerate(params)}
    open_, size, limit_at, done = {}, {}, {}, []
    for p in params:
        key = (p.dtype, p.device)
        open_.setdefault(key, []).append(p)
        size[key] = size.get(key, 0) + p.numel() * p.element_size()
        i = limit_at.setdefault(key, 0)
        if size[key] >= limits[i]:
            done.append(open_.pop(key))
            size[key] = 0
            limit_at[key] = min(i + 1, len(limits) - 1)
    done += [b for b in open_.values() if b]
    return sorted(done, key=lambda b: pos[id(b[0])]) if sort else done


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


class BucketedCore(_DataParallel):
    """Buckets of `layout` (lists of parameters, in launch order), all-reduced during backward."""

    find_unused = False                             # bucketed.py: BucketedDDP's option

    def __init__(self, module, layout: list, process_group=None, broadcast_buffers: bool = True):
        super().__init__(module, process_group, broadcast_buffers)
        self._build(layout)
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad_ready) for _, p in self.named]

    def _build(self, layout: list) -> None:
        self.buckets = [_Bucket(ps) for ps in layout]
        self.bucket_of = {p: b for b in self.buckets for p in b.params}
        self._next = 0                              # next bucket to launch

    def _load(self, b: _Bucket, p) -> None:
        """p's gradient / N into its slice of the bucket: the all-reduce's sum is the mean."""
        if p.grad is None:
            b.slice(p).zero_()
        else:
            torch.div(p.grad, self.world, out=b.slice(p))  # copy and divide in one pass

    def _on_grad_ready(self, p) -> None:
        if not self.require_sync:
            return
        b = self.bucket_of[p]
        if p in b.ready:
            self._drain()
            raise RuntimeError(tr("BucketedDDP: the gradient of {name!r} was finished twice before "
                                  "sync_gradients(). Run the backward passes of all micro-batches but "
                                  "the last inside `with ddp.no_sync():`.", name=self.names[p]))
        self._load(b, p)
        b.ready.add(p)
        self._took(p)
        self._launch_full()

    def _took(self, p) -> None:                     # bucketed.py: the rebuild's order, a stamp
        pass

    def _launch_full(self) -> None:
        while self._next < len(self.buckets):       # in bucket order, on every rank
            b = self.buckets[self._next]
            if len(b.ready) < len(b.params):
                return
            b.work = self._all_reduce(b)
            self._next += 1

    def _all_reduce(self, b: _Bucket):
        return dist.all_reduce(b.buffer, group=self.group, async_op=True)

    def sync_gradients(self) -> None:
        """Launch what is left (unused parameters), wait for every bucket, set the gradients."""
        if not self.require_sync:
            return
        missing = [p for b in self.buckets[self._next:] for p in b.params if p not in b.ready]
        if missing and not self.find_unused:
            self._drain()
            names = ", ".join(tr("{name!r} ({k} elements)", name=self.names[p], k=p.numel()) for p in missing)
            raise RuntimeError(tr(
                "BucketedDDP on rank {rank}: no gradient arrived for {names} in this backward pass: it "
                "was not used in forward, so its bucket never filled. Pass "
                "BucketedDDP(model, find_unused_parameters=True) to all-reduce zeros for it, or set "
                "requires_grad=False on it, or delete it from the model.", rank=dist.get_rank(), names=names))
        for p in missing:                           # unused in the last backward: what it has
            self.bucket_of[p].ready.add(p)          # (accumulated under no_sync) or zeros
            self._load(self.bucket_of[p], p)
        self._launch_full()
        used = self._used_anywhere()
        for b in self.buckets:
            b.work.wait()
            for p in b.params:
                if used is None or p in used:       # no rank used it: .grad untouched (None)
                    self._set_grad(p, b.slice(p))
        self._synced()
        self._reset()

    def _used_anywhere(self):                       # None: all (bucketed.py asks the ranks)
        return None

    def _set_grad(self, p, s) -> None:
        if p.grad is None:
            p.grad = s.clone()
        else:
            p.grad.copy_(s)

    def _synced(self) -> None:                      # bucketed.py: stamp, plan the rebuild
        pass

    def _drain(self) -> None:
        """After an error: launch what is left (the other ranks wait for it), wait, forget."""
        if self._next > 0 or any(b.ready for b in self.buckets):
            for b in self.buckets[self._next:]:
                for p in b.params:
                    if p not in b.ready:
                        self._load(b, p)
                        b.ready.add(p)
            self._launch_full()
        for b in self.buckets:
            if b.work is not None:
                b.work.wait()
        self._reset()

    def _reset(self) -> None:
        for b in self.buckets:
            b.ready.clear()
            b.work = None
        self._next = 0
