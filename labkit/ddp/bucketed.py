"""BucketedDDP: gradients in buckets, each all-reduced during backward (layer 3).

It follows torch 2.13's DistributedDataParallel (torch/nn/parallel/distributed.py,
`_BucketCapacityConfig`, and the C++ Reducer's `compute_bucket_assignment_by_size` and
`rebuild_buckets`), so that the benchmark compares like with like:

- bucket layout: parameters are cut into buckets by size, a bucket closing once it holds at
  least its cap (one open bucket per dtype). The first backward uses ONE bucket holding every
  parameter, because the order in which gradients arrive is not known yet; after it the
  buckets are rebuilt once, in the order rank 0 saw gradients arrive, with a 1 MiB first
  bucket and 25 MiB after it when `bucket_cap_mb` is not given, and `bucket_cap_mb` for every
  bucket when it is. With `find_unused_parameters=True` the buckets are cut at construction
  (reverse order of definition, the small one last) and never rebuilt.
- a parameter that no rank used keeps `.grad` None (a used-parameter bitmap, all-reduced
  after the buckets, as torch's reducer keeps its local_used_map); one used in a no_sync
  micro-batch but not in the last keeps the gradient accumulated there.
- buffers are broadcast from rank 0 before every forward (`broadcast_buffers=True`).
- `gradient_as_bucket_view=True`: each `.grad` becomes a view into its bucket, so backward
  accumulates straight into the bucket and nothing is copied back: 1x the gradient memory
  instead of 2x.
"""
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn

from labkit.comm.objects import broadcast_json
from labkit.ddp.clock import HostClock
from labkit.ddp.base import MB, _DataParallel
from labkit.i18n import tr

DEFAULT_CAP_MB = 25                 # torch's _DEFAULT_BUCKET_CAP_MB
FIRST_BUCKET_BYTES = 1 * MB         # torch's dist._DEFAULT_FIRST_BUCKET_BYTES
_WRAPPER = weakref.WeakKeyDictionary()   # module -> weakref to the BucketedDDP that hooks it


def assign_buckets(params: list, limits: list, sort: bool = False) -> list:
    """Cut `params` (in this order) into buckets as torch's compute_bucket_assignment_by_size
    does: one open bucket per dtype and device; a bucket closes once it holds >= its limit
    (limits[0] for the first bucket of a dtype, then the next, the last one repeated).
    Returns lists of parameters: closed buckets in closing order, then the open ones; with
    `sort`, ordered by the position of their first parameter in `params` (torch sorts so
    when it has no gradient-ready order yet)."""
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


class BucketedDDP(_DataParallel):
    """Buckets all-reduced during backward, torch DDP's layout and options (module docstring).

    A post-accumulate-grad hook on each parameter (a tied weight's fires once, after both
    uses are summed) puts its finished gradient into its bucket; when a bucket is full its
    all-reduce is launched asynchronously, in bucket order on every rank. Only
    `sync_gradients()` waits. A parameter unused in forward never gets a gradient, so its
    bucket would never fill: with find_unused_parameters=True it is sent as zeros at
    `sync_gradients()` (and keeps .grad None if no rank used it), otherwise that call raises,
    naming it. `remove_hooks()` turns the module back into a plain one; wrapping a module
    again (re-running a cell) removes the previous wrapper's hooks.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float = None,
                 find_unused_parameters: bool = False, process_group=None,
                 gradient_as_bucket_view: bool = False, broadcast_buffers: bool = True):
        old = _WRAPPER.get(module)
        if old is not None and old() is not None:
            old().remove_hooks()                    # the module was wrapped before
        super().__init__(module, process_group, broadcast_buffers)
        self.cap_bytes = int((DEFAULT_CAP_MB if bucket_cap_mb is None else bucket_cap_mb) * MB)
        self.first_cap_bytes = FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.cap_bytes
        self.find_unused = find_unused_parameters
        self.as_view = gradient_as_bucket_view
        self.trace, self.clock = None, HostClock()  # a list to record stamps into (timeline)
        self._used, self._seen, self._pending = set(), [], None
        self._rebuilt = find_unused_parameters      # torch never rebuilds with find_unused
        params = [p for _, p in self.named]
        if not find_unused_parameters:
            limits = [float("inf")]                 # first backward: one bucket
        elif self.first_cap_bytes < self.cap_bytes:
            limits = [self.first_cap_bytes, self.cap_bytes]
        else:
            limits = [self.cap_bytes]
        self._build(list(reversed(assign_buckets(params, limits, sort=True))))
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad_ready) for p in params]
        _WRAPPER[module] = weakref.ref(self)        # (not on the module: it must still pickle)

    def remove_hooks(self) -> None:
        """Stop reacting to backward: the module's gradients stay local from now on."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._drain()

    def _build(self, layout: list) -> None:
        """New buckets from lists of parameters, in launch order (moving any gradient that is
        a view into an old bucket)."""
        self.buckets = [_Bucket(ps) for ps in layout]
        self.bucket_of = {p: b for b in self.buckets for p in b.params}
        if self.as_view:
            for b in self.buckets:
                for p in b.params:
                    if p.grad is not None:
                        b.slice(p).copy_(p.grad)
                        p.grad = b.slice(p)
        self._next = 0                              # next bucket to launch

    def bucket_layout(self) -> list:
        """Parameter names of each bucket, in launch order."""
        return [[self.names[p] for p in b.params] for b in self.buckets]

    def bucket_sizes(self) -> list:
        """Bytes of each bucket, in launch order."""
        return [b.buffer.numel() * b.buffer.element_size() for b in self.buckets]

    def forward(self, *args, **kwargs):
        if self._pending is not None and torch.is_grad_enabled():
            self._rebuild(self._pending)            # as torch: before the second forward
        return super().forward(*args, **kwargs)

    def _stamp(self, *record) -> None:
        if self.trace is not None:
            self.trace.append(record)

    def _load(self, b: _Bucket, p) -> None:
        """Put p's gradient / N into its slice of the bucket, so that the all-reduce's sum is
        the mean (as a view: make .grad that slice)."""
        s = b.slice(p)
        if p.grad is None:
            s.zero_()
        elif self.as_view and p.grad.data_ptr() == s.data_ptr():
            s.div_(self.world)                      # backward added into the bucket already
        else:
            torch.div(p.grad, self.world, out=s)    # copy and divide in one pass
            if self.as_view:
                p.grad = s                          # from now on backward adds into the bucket

    def _on_grad_ready(self, p) -> None:
        self._used.add(p)                           # used in this step, no_sync ones included
        if not self.require_sync:
            return
        b = self.bucket_of[p]
        if p in b.ready:
            self._drain()
            raise RuntimeError(tr("BucketedDDP: the gradient of {name!r} was finished twice before "
                                  "sync_gradients(). Run the backward passes of all micro-batches but "
                                  "the last inside `with ddp.no_sync():`.", name=self.names[p]))
        if not self._rebuilt:
            self._seen.append(p)
        self._load(b, p)
        b.ready.add(p)
        self._stamp("grad", self.names[p], self.clock.now())
        self._launch_full()

    def _launch_full(self) -> None:
        # In bucket order, so that every rank issues the same collectives in the same order.
        while self._next < len(self.buckets):
            b = self.buckets[self._next]
            if len(b.ready) < len(b.params):
                return
            launched = self.clock.now() if self.trace is not None else None
            b.work = dist.all_reduce(b.buffer, group=self.group, async_op=True)
            if self.trace is not None:
                rec = ["bucket", self._next, launched, None, b.buffer.numel() * b.buffer.element_size()]
                self.trace.append(rec)
                b.work.get_future().then(lambda _, rec=rec: rec.__setitem__(3, self.clock.now()))
            self._next += 1

    def _missing(self) -> list:
        return [p for b in self.buckets[self._next:] for p in b.params if p not in b.ready]

    def sync_gradients(self) -> None:
        """Launch what is left (unused parameters), wait for every bucket, set the gradients."""
        if not self.require_sync:
            return
        missing = self._missing()
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
        used = None
        if self.find_unused:                        # after the buckets, in the same order everywhere
            flags = torch.tensor([p in self._used for _, p in self.named], dtype=torch.int32,
                                 device=self.named[0][1].device if self.named else None)
            dist.all_reduce(flags, group=self.group)
            used = {p for (_, p), f in zip(self.named, flags.tolist()) if f}
        for b in self.buckets:
            b.work.wait()
            for p in b.params:
                if used is not None and p not in used:
                    continue                        # no rank used it: .grad untouched (None)
                s = b.slice(p)
                if self.as_view:
                    if p.grad is None or p.grad.data_ptr() != s.data_ptr():
                        p.grad = s
                elif p.grad is None:
                    p.grad = s.clone()
                else:
                    p.grad.copy_(s)
        self._stamp("synced", None, self.clock.now())
        if not self._rebuilt:
            self._pending, self._rebuilt = self._seen, True
        self._reset()

    def _drain(self) -> None:
        """Leave a clean state after an error: launch the buckets not yet launched (the other
        ranks wait for them), wait for every one, forget this step. Between steps: only forget."""
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
        if self._pending is None:
            self._rebuilt = self.find_unused        # the order seen so far is not a whole step
        self._reset()

    def _reset(self) -> None:
        for b in self.buckets:
            b.ready.clear()
            b.work = None
        self._next, self._used = 0, set()
        if not self._rebuilt:
            self._seen = []

    def _rebuild(self, seen: list) -> None:
        """Rebuild the buckets in the order gradients became ready on rank 0 (once)."""
        index = {p: i for i, (_, p) in enumerate(self.named)}
        order = broadcast_json([index[p] for p in seen], src=self.src, group=self.group)
        order = [self.named[i][1] for i in order]     # tensors, not pickles: comm/objects.py
        self._pending, self._seen = None, []
        layout = assign_buckets(order, [self.first_cap_bytes, self.cap_bytes])
        if [[id(p) for p in ps] for ps in layout] != [[id(p) for p in b.params] for b in self.buckets]:
            self._build(layout)
