"""BucketedDDP: bucketed_core.py's buckets, with torch DDP's layout and options (layer 3).

The idea (buckets all-reduced during backward) is in bucketed_core.py; this file adds what
makes it behave as torch's DDP, and the timeline's stamps (`trace`, `clock`).

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
from labkit.ddp.base import MB, trainable
from labkit.ddp.bucketed_core import BucketedCore, _Bucket, assign_buckets  # noqa: F401 (importable here)
from labkit.ddp.clock import HostClock

DEFAULT_CAP_MB = 25                 # torch's _DEFAULT_BUCKET_CAP_MB
FIRST_BUCKET_BYTES = 1 * MB         # torch's dist._DEFAULT_FIRST_BUCKET_BYTES
_WRAPPER = weakref.WeakKeyDictionary()   # module -> weakref to the BucketedDDP that hooks it


class BucketedDDP(BucketedCore):
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
        self.cap_bytes = int((DEFAULT_CAP_MB if bucket_cap_mb is None else bucket_cap_mb) * MB)
        self.first_cap_bytes = FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.cap_bytes
        self.find_unused = find_unused_parameters
        self.as_view = gradient_as_bucket_view
        self.trace, self.clock = None, HostClock()  # a list to record stamps into (timeline)
        self._used, self._seen, self._pending = set(), [], None
        self._rebuilt = find_unused_parameters      # torch never rebuilds with find_unused
        if not find_unused_parameters:
            limits = [float("inf")]                 # first backward: one bucket
        elif self.first_cap_bytes < self.cap_bytes:
            limits = [self.first_cap_bytes, self.cap_bytes]
        else:
            limits = [self.cap_bytes]
        params = [p for _, p in trainable(module)]
        super().__init__(module, list(reversed(assign_buckets(params, limits, sort=True))),
                         process_group, broadcast_buffers)
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
        super()._build(layout)
        if self.as_view:
            for b in self.buckets:
                for p in b.params:
                    if p.grad is not None:
                        b.slice(p).copy_(p.grad)
                        p.grad = b.slice(p)

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
        """As the core's, and with gradient_as_bucket_view make .grad that slice."""
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
        super()._on_grad_ready(p)

    def _took(self, p) -> None:
        if not self._rebuilt:
            self._seen.append(p)
        self._stamp("grad", self.names[p], self.clock.now())

    def _all_reduce(self, b: _Bucket):
        launched = self.clock.now() if self.trace is not None else None
        work = super()._all_reduce(b)
        if self.trace is not None:
            rec = ["bucket", self._next, launched, None, b.buffer.numel() * b.buffer.element_size()]
            self.trace.append(rec)
            work.get_future().then(lambda _, rec=rec: rec.__setitem__(3, self.clock.now()))
        return work

    def _missing(self) -> list:
        return [p for b in self.buckets[self._next:] for p in b.params if p not in b.ready]

    def _used_anywhere(self):
        if not self.find_unused:
            return None
        flags = torch.tensor([p in self._used for _, p in self.named], dtype=torch.int32,
                             device=self.named[0][1].device if self.named else None)
        dist.all_reduce(flags, group=self.group)   # after the buckets, in the same order everywhere
        return {p for (_, p), f in zip(self.named, flags.tolist()) if f}

    def _set_grad(self, p, s) -> None:
        if not self.as_view:
            return super()._set_grad(p, s)
        if p.grad is None or p.grad.data_ptr() != s.data_ptr():
            p.grad = s

    def _synced(self) -> None:
        self._stamp("synced", None, self.clock.now())
        if not self._rebuilt:
            self._pending, self._rebuilt = self._seen, True

    def _drain(self) -> None:
        if self._pending is None:
            self._rebuilt = self.find_unused        # the order seen so far is not a whole step
        super()._drain()

    def _reset(self) -> None:
        super()._reset()
        self._used = set()
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
