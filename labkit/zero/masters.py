"""The optimizer for a model whose parameters are shards (stage 3), with fp32 masters.

    opt = MasterOptimizer(model.parameters(), torch.optim.Adam, mixed_precision=True, lr=1e-3)

fp32: the inner torch optimizer works on the shards themselves (nothing added: any torch
optimizer built on `model.parameters()` would do the same). Mixed precision: it works on fp32
master copies of the 16-bit shards and writes them back, rounded, after each update; the fp32
gradient it reads is made inside `step()` and dropped after it (or made, divided by the loss
scale, by `labkit.tricks.loss_scale.LossScaler.unscale_`). Either way `step()` before a
backward says so instead of silently doing nothing.
"""
import torch

from labkit.i18n import tr
from labkit.zero.optim import InnerOptimizer, check_optimizer_class


class MasterOptimizer(InnerOptimizer):
    def __init__(self, params, optimizer_class, *, mixed_precision=False, owner=None,
                 masters=None, **optimizer_kwargs):
        check_optimizer_class(optimizer_class)
        self.params = [p for p in params if p.requires_grad]
        self.grads_prepared = False     # a loss scaler already wrote the fp32 gradients (unscaled)
        self.mixed, self.owner = mixed_precision, owner
        if mixed_precision:
            init = masters or [p.detach().float() for p in self.params]
            self.work = [torch.nn.Parameter(m.clone()) for m in init]
        else:
            self.work = self.params
        self.inner = optimizer_class(self.work, **optimizer_kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()          # kept: the shard gradient's memory is the formula's
        if self.owner is not None:
            self.owner.backward_seen = False

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("this optimizer's step does not take a closure")
        if self.owner is not None and not self.owner.backward_seen:
            import torch.distributed as dist
            raise RuntimeError(tr("rank {rank}: optimizer.step() was called before any loss.backward() "
                                  "since the last zero_grad(): there are no gradients. Call "
                                  "loss.backward() first, then step(), then zero_grad().",
                                  rank=dist.get_rank()))
        if self.mixed and not self.grads_prepared:
            for w, p in zip(self.work, self.params):
                w.grad = p.grad.float() if p.grad is not None else None
        self.grads_prepared = False
        self.inner.step()
        if self.mixed:
            for w, p in zip(self.work, self.params):
                p.copy_(w.detach())
                w.grad = None
        return None

    def __repr__(self):
        return f"MasterOptimizer({type(self.inner).__name__}, mixed={self.mixed})"
