"""ZeRO stages 0, 1 and 2 as an optimizer that owns flat buffers (layer 3, inside a rank).

    opt = ZeroOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)   # stage 1, torch's
    loss.backward(); opt.step(); opt.zero_grad()                         # ZeroRedundancyOptimizer signature

The trainable parameters are laid into flat buckets (`labkit.zero.flat.Flat`, about
`bucket_mb` MiB each, in reverse order of registration, i.e. roughly the order backward
produces their gradients); every model parameter becomes a view into its bucket's buffer, so
the model trains in place. Each bucket is split into N equal shards; rank r owns shard r of
every bucket.

stage 0  DDP baseline: full gradients, all-reduced at `step()`, full optimizer state.
stage 1  full gradients, reduce-scattered at `step()` (each rank only needs the sum for its
         own shard, ZeRO paper section 5.1); the optimizer state covers the own shard only;
         after the update the shards are all-gathered into the full parameters.
stage 2  as stage 1, but each bucket is reduce-scattered during backward as soon as its last
         gradient is accumulated (post-accumulate-grad hooks) and only the own shard of the
         gradient is kept (`stage2.py`).
mixed_precision: parameters and gradients in bfloat16, the optimizer works on fp32 master
copies of the own shard (all of it at stage 0); the fp32 gradient it reads exists only
inside `step()`.

Gradients: the hooks move each parameter's `.grad` into the bucket's gradient buffer and set
`.grad` to None, so the buffer (stages 0, 1) or the own shard (stage 2) is the gradient
memory; `labkit_memory()` shows those buffers to `labkit.memory.measure`.
"""
import torch
import torch.distributed as dist

from labkit.i18n import tr
from labkit.zero import flat as F

MB = 1024 * 1024
HALF = torch.bfloat16


def check_optimizer_class(optimizer_class) -> None:
    if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
        got = optimizer_class.__name__ if hasattr(optimizer_class, "__name__") else repr(optimizer_class)
        hint = " (pass the class, not an instance)" if isinstance(optimizer_class, torch.optim.Optimizer) else ""
        raise TypeError(f"optimizer_class must be a torch optimizer class such as torch.optim.Adam, "
                        f"got {got}{hint}; the learning rate and other options go as keywords: "
                        "wrap(model, torch.optim.Adam, stage=1, lr=1e-3)")


def buckets_of(named: list, bucket_mb: float, itemsize: int) -> list:
    """Split (name, param) pairs, in reverse order, into lists of about bucket_mb MiB."""
    out, cur, size = [], [], 0
    for name, p in reversed(named):
        if cur and size + p.numel() * itemsize > bucket_mb * MB:
            out.append(cur)
            cur, size = [], 0
        cur.append((name, p))
        size += p.numel() * itemsize
    return out + ([cur] if cur else [])


class Bucket:
    """One flat bucket: its layout, full parameter buffer, gradient buffer, optimizer tensor."""

    def __init__(self, named, stage, mixed, world, rank, reduce_dtype):
        self.layout = F.Flat(named, world, rank)
        self.params = [p for _, p in named]
        full32 = self.layout.flatten({n: p.detach() for n, p in named}, dtype=torch.float32)
        self.param = full32.to(HALF) if mixed else full32
        for (name, p), v in zip(named, self.layout.views(self.param).values()):
            p.data = v                                     # the model now trains in this buffer
        lo, hi = (0, self.layout.size) if stage == 0 else (self.layout.lo, self.layout.hi)
        self.lo, self.hi = lo, hi
        own = self.param[lo:hi]
        # the tensor the inner optimizer updates: an alias of the own region (fp32), or an
        # fp32 master copy of it (mixed precision)
        self.work = torch.nn.Parameter(full32[lo:hi].clone() if mixed else own)
        self.grad_dtype = reduce_dtype or self.param.dtype
        self.grad = None          # full gradient buffer (stages 0, 1; stage 2 during backward)
        self.grad_shard = None    # stage 2: the own shard of the summed gradient
        if stage < 2:
            self.grad = self.param.new_zeros(self.layout.size, dtype=self.grad_dtype)
        else:
            self.grad_shard = self.param.new_zeros(self.layout.shard)
        self.ready = 0            # gradients accumulated in this backward (stage 2)


class InnerOptimizer:
    """torch.optim.Optimizer's face for a wrapper whose real optimizer is `self.inner` (built on
    this rank's shards or masters): param_groups, state and state dicts are the inner one's."""

    @property
    def param_groups(self):
        return self.inner.param_groups

    @property
    def state(self):
        return self.inner.state

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, sd):
        self.inner.load_state_dict(sd)


class ZeroOptimizer(InnerOptimizer):
    """A sharding optimizer with the signature of torch's ZeroRedundancyOptimizer.

    ZeroOptimizer(params, optimizer_class, *, stage=1, group=None, mixed_precision=False,
                  bucket_mb=25, reduce_dtype=None, **optimizer_kwargs)
    Every rank must construct it with the same parameters; rank 0's values are broadcast.
    """

    def __init__(self, params, optimizer_class, *, stage: int = 1, group=None,
                 mixed_precision: bool = False, bucket_mb: float = 25, reduce_dtype=None,
                 names: dict = None, **optimizer_kwargs):
        check_optimizer_class(optimizer_class)
        if stage not in (0, 1, 2):
            raise ValueError(f"ZeroOptimizer covers stages 0, 1 and 2, got {stage!r}; stage 3 "
                             "shards the model too: use labkit.zero.wrap(model, ..., stage=3)")
        params = list({id(p): p for p in params}.values())
        if not params or not all(isinstance(p, torch.Tensor) for p in params):
            raise TypeError("params must be an iterable of tensors, e.g. model.parameters()")
        self.stage, self.group, self.mixed = stage, group, mixed_precision
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.global_rank = dist.get_rank()
        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            for p in params:
                dist.broadcast(p.data, src, group=group)       # identical replicas
        names = names or {}
        named = [(names.get(id(p), f"param{i}"), p) for i, p in enumerate(params) if p.requires_grad]
        itemsize = 2 if mixed_precision else 4
        self.buckets = [Bucket(b, stage, mixed_precision, self.world, self.rank, reduce_dtype)
                        for b in buckets_of(named, bucket_mb, itemsize)]
        self.inner = optimizer_class([b.work for b in self.buckets], **optimizer_kwargs)
        self.backward_seen = False
        self._hooks = []
        from labkit.zero import stage2
        for b in self.buckets:
            for p in b.params:
                self._hooks.append(p.register_post_accumulate_grad_hook(stage2.make_hook(self, b, p)))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradient buffers (they are kept: their memory is the gradients')."""
        for b in self.buckets:
            for t in (b.grad, b.grad_shard):
                if t is not None:
                    t.zero_()
            for p in b.params:
                p.grad = None
        self.backward_seen = False

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("ZeroOptimizer.step does not take a closure")
        if not self.backward_seen:
            raise RuntimeError(tr("rank {rank}: optimizer.step() was called before any loss.backward() "
                                  "since the last zero_grad(): there are no gradients to reduce. Call "
                                  "loss.backward() first, then step(), then zero_grad().",
                                  rank=self.global_rank))
        for b in self.buckets:
            g = self._own_gradient(b)
            b.work.grad = g.float() if self.mixed else g
        self.inner.step()
        for b in self.buckets:
            if self.mixed:
                b.param[b.lo:b.hi].copy_(b.work.detach())
            b.work.grad = None if self.mixed else b.work.grad
            if self.stage > 0:
                F.all_gather(b.param, b.param[b.lo:b.hi].clone(), self.group)
        return None

    def _own_gradient(self, b: Bucket) -> torch.Tensor:
        """The averaged gradient of the region this rank updates, communicating if needed."""
        if self.stage == 2:
            return b.grad_shard
        if self.stage == 0:
            F.all_reduce(b.grad, self.group).div_(self.world)
            return b.grad.to(b.param.dtype) if b.grad.dtype != b.param.dtype else b.grad
        shard = F.reduce_scatter(b.grad, self.group).div_(self.world)
        return shard.to(b.param.dtype) if shard.dtype != b.param.dtype else shard

    # -- for labkit.memory.measure ------------------------------------------------------------
    def labkit_memory(self):
        """(category, tensor) pairs that `labkit.memory.measure` cannot reach by itself."""
        for b in self.buckets:
            for t in (b.grad, b.grad_shard):
                if t is not None:
                    yield "grads", t

    def padding(self) -> dict:
        """Padding elements this rank holds, by category (see `labkit.zero.accounting`)."""
        full = sum(b.layout.padding for b in self.buckets)
        own = sum(b.layout.shard_padding for b in self.buckets) if self.stage else full
        return {"params": full, "grads": full if self.stage < 2 else own, "optimizer": own}

    def __repr__(self):
        return (f"ZeroOptimizer(stage={self.stage}, {type(self.inner).__name__}, "
                f"{len(self.buckets)} bucket(s), N={self.world}, mixed={self.mixed})")
