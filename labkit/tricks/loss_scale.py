"""Loss scaling for fp16, static and dynamic, as torch.amp.GradScaler does it (layer 3).

    scaler = LossScaler(dynamic=True, init_scale=2.0**16, growth_interval=2000)
    scaler.scale(loss).backward()     # the loss times S: every gradient is S times larger
    scaler.step(opt)                  # gradients / S (in fp32), skipped if any is inf or NaN
    scaler.update()                   # dynamic: S / 2 after a skip, S x 2 after K good steps

fp16 keeps 10 bits of mantissa and 5 of exponent: its smallest positive value is 2^-24 (about
6e-8; below 2^-14 only as subnormals, with fewer bits) and its largest 65504. Converting rounds
to the nearest value (ties to even): a gradient of magnitude at most 2^-25 becomes exactly 0 in
fp16 (it underflows), one between 2^-25 and 2^-24 rounds up to 2^-24. (Flush-to-zero, FTZ, is
another thing: a hardware mode that treats subnormals themselves as 0, torch.set_flush_denormal.)
Multiplying the loss by S multiplies every
gradient by S (backward is linear), which lifts the small ones above 2^-24; the optimizer must see
the true gradient, so the gradients are divided by S again in fp32 before the update. If S is too
large, some gradient overflows to inf: the step is skipped (the weights are not touched) and a
dynamic scaler halves S. bf16 has fp32's 8 exponent bits: gradients do not underflow, no scaling needed.

With data parallelism, ZeRO or FSDP every rank holds different gradients (or a different shard):
one rank may overflow while the others do not. The ranks must agree, or one would skip the step
and the others would not and the replicas would drift apart: the found-inf flag is all-reduced
(MAX) over the group, one call of 4 bytes per step, before anyone steps (ShardedGradScaler does
the same with a SUM).

The optimizer can be a plain torch optimizer on fp32 parameters (autocast: the gradients are
fp32) or labkit's MasterOptimizer on 16-bit parameters: then the 16-bit gradients are copied
into the fp32 masters' gradients and divided there, never in fp16 (GradScaler refuses fp16
gradients for that reason: dividing in fp16 would underflow them again).
"""
import torch
import torch.distributed as dist

import labkit
from labkit.i18n import tr


class LossScaler:
    """Static (`dynamic=False`: S never changes) or dynamic loss scaling; `group`: the ranks
    that agree on skipping (all of them by default, when torch.distributed is running)."""

    def __init__(self, init_scale: float = 2.0 ** 16, *, dynamic: bool = True,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5, growth_interval: int = 2000,
                 group=None, agree: bool = True, device=None):
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
        if not (growth_factor > 1 and 0 < backoff_factor < 1):
            raise ValueError(f"need growth_factor > 1 and 0 < backoff_factor < 1, "
                             f"got {growth_factor}, {backoff_factor}")
        if not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"growth_interval must be a whole number >= 1, got {growth_interval!r}")
        self._scale = torch.full((1,), float(init_scale), dtype=torch.float32,
                                 device=device if device is not None else labkit.device())
        self.dynamic, self.growth_factor, self.backoff_factor = dynamic, growth_factor, backoff_factor
        self.growth_interval, self.group, self.agree = growth_interval, group, agree
        self.good_steps = 0               # steps since the last change of S (GradScaler's growth tracker)
        self.history = []                 # one dict per update(): scale used, inf here, inf anywhere, skipped
        self._found = None                # (this rank's flag, the agreed flag) after unscale_

    @property
    def scale_value(self) -> float:
        return float(self._scale.item())

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale.to(loss.device)

    @staticmethod
    def _pairs(optimizer) -> list:
        """[(gradient the optimizer reads, where it comes from)] for every parameter with one."""
        if getattr(optimizer, "mixed", False) and hasattr(optimizer, "work"):     # MasterOptimizer
            return [(w, p) for w, p in zip(optimizer.work, optimizer.params) if p.grad is not None]
        out = []
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    if p.grad.dtype == torch.float16:
                        raise ValueError(tr("these gradients are fp16: dividing them by the scale in fp16 would "
                                            "underflow the small ones to zero again. Keep fp32 masters (labkit.zero."
                                            "masters.MasterOptimizer) or fp32 parameters under "
                                            "torch.autocast(dtype=torch.float16)"))
                    out.append((p, p))
        return out

    @torch.no_grad()
    def unscale_(self, optimizer) -> bool:
        """Divide the gradients the optimizer will read by S (in fp32), look for inf/NaN, agree with
        the other ranks (one all-reduce). Returns the agreed flag: True means skip this step."""
        if self._found is not None:
            raise RuntimeError(tr("unscale_() was already called since the last update(): call step() then update()"))
        inv = self._scale.double().reciprocal().float()          # as GradScaler: exact for powers of two
        pairs = self._pairs(optimizer)
        local = torch.zeros(1, device=pairs[0][1].grad.device if pairs else self._scale.device)
        for target, source in pairs:
            if target is not source:                             # a master: fp32 copy of the 16-bit gradient
                target.grad = source.grad.float()
            target.grad.mul_(inv)
            if not torch.isfinite(target.grad).all():
                local.fill_(1.0)
        agreed = local.clone()
        if self.agree and dist.is_available() and dist.is_initialized() and dist.get_world_size(self.group) > 1:
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.group)
        self._found = (bool(local.item()), bool(agreed.item()))
        if getattr(optimizer, "mixed", False) and hasattr(optimizer, "work"):
            optimizer.grads_prepared = True
        return self._found[1]

    def step(self, optimizer) -> bool:
        """optimizer.step() unless a gradient was inf or NaN on any rank; True if it stepped."""
        if self._found is None:
            self.unscale_(optimizer)
        if self._found[1]:
            if getattr(optimizer, "grads_prepared", False):
                for master in optimizer.work:
                    master.grad = None                   # the fp32 copies made by unscale_
                optimizer.grads_prepared = False
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Record this step; a dynamic scaler halves S after a skip and doubles it after
        `growth_interval` good steps in a row (GradScaler's rule)."""
        if self._found is None:
            raise RuntimeError(tr("update() before step(): nothing was checked this iteration"))
        local, found = self._found
        self.history.append(dict(scale=self.scale_value, inf_here=local, inf_anywhere=found, skipped=found))
        if self.dynamic:
            if found:
                self._scale *= self.backoff_factor
                self.good_steps = 0
            else:
                self.good_steps += 1
                if self.good_steps == self.growth_interval:
                    self._scale *= self.growth_factor
                    self.good_steps = 0
        self._found = None

    def state_dict(self) -> dict:
        return dict(scale=self.scale_value, good_steps=self.good_steps, dynamic=self.dynamic)


@torch.no_grad()
def underflowed(reference: torch.Tensor, dtype=torch.float16) -> int:
    """Elements nonzero in `reference` (fp32 gradients) that become exactly 0 in `dtype` (in
    fp16: those of magnitude at most 2^-25, half the smallest subnormal)."""
    return int(((reference != 0) & (reference.to(dtype) == 0)).sum())


def ranges(dtype) -> dict:
    """The numbers that bound a float format: largest, smallest normal, smallest subnormal,
    and the gap between 1 and the next value (machine epsilon)."""
    fi = torch.finfo(dtype)
    tiny_sub = fi.smallest_normal * fi.eps          # one unit in the last place below the normals
    return dict(max=fi.max, smallest_normal=fi.smallest_normal, smallest_subnormal=tiny_sub, eps=fi.eps,
                bits=fi.bits)
