"""Optimizer state offloaded to host memory, the update taken there (layer 3).

    opt = labkit.tricks.offload.Offloaded(model.parameters(), torch.optim.AdamW, lr=1e-3)
    loss.backward(); opt.step()          # grads device -> host, update on the host, params back

ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840) keeps the fp32 master weights and Adam's m and v
in CPU memory, and the optimizer step runs there, on the CPU; the GPU keeps the 16-bit parameters
and does forward and backward. The 16-bit gradients are copied to the CPU bucket by bucket during
backward, as they are produced, and after the step the updated 16-bit parameters are copied back:
2 + 2 bytes per parameter over PCIe.

Here: the same state in the same places, more simply. The host holds an fp32 copy of every
trainable parameter (the master) and the inner optimizer's state; the device keeps the model's
parameters, and its gradients until the step starts, which then copies all of them to the host
at once (not bucket by bucket during backward). The host buffers are pinned when CUDA is present
(so the copies can be asynchronous DMA). `seconds` splits the last step into to_host, update and
to_device; `moved` counts the bytes copied each way.

On a machine without a GPU the "device" is host memory too: the copies are real memcpy's
(timed) but nothing leaves any device, so the memory saving is accounting only
(`measure` labels the categories that would live on the host) and the copy times are not
PCIe times. Neither can be measured here; on a GPU the same class runs unchanged (untested).
"""
import time

import torch

from labkit.zero.optim import InnerOptimizer
from labkit.i18n import N_

HOST_CATEGORIES = (N_("master"), N_("momentum"), N_("variance"), N_("other"))


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Offloaded(InnerOptimizer):
    """`optimizer_class` built on fp32 host copies of `params`; step() moves grads and params."""

    def __init__(self, params, optimizer_class, **optimizer_kwargs):
        self.params = [p for p in params if p.requires_grad]
        pin = torch.cuda.is_available()
        self.host = []
        for p in self.params:
            h = torch.empty(p.shape, dtype=torch.float32, device="cpu", pin_memory=pin)
            h.copy_(p.detach())
            self.host.append(torch.nn.Parameter(h))
        self.inner = optimizer_class(self.host, **optimizer_kwargs)
        self.seconds = {"to_host": 0.0, "update": 0.0, "to_device": 0.0}
        self.moved = {"to_host": 0, "to_device": 0}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise ValueError("Offloaded.step does not take a closure")
        dev = self.params[0].device
        t0 = time.perf_counter()
        moved = 0
        for p, h in zip(self.params, self.host):
            if p.grad is None:
                h.grad = None
                continue
            h.grad = torch.empty_like(h)                   # host fp32 gradient, for this step only
            h.grad.copy_(p.grad, non_blocking=True)
            moved += p.grad.numel() * p.grad.element_size()
        _sync(dev)
        t1 = time.perf_counter()
        self.inner.step()
        t2 = time.perf_counter()
        back = 0
        for p, h in zip(self.params, self.host):
            p.copy_(h.detach(), non_blocking=True)         # rounded to the model's dtype on the way
            back += p.numel() * p.element_size()
            h.grad = None
        _sync(dev)
        t3 = time.perf_counter()
        self.seconds = {"to_host": t1 - t0, "update": t2 - t1, "to_device": t3 - t2}
        self.moved = {"to_host": moved, "to_device": back}
        return None

def measure(model, optimizer, label: str = ""):
    """`labkit.memory.measure`, with the optimizer's categories labelled as host memory when
    `optimizer` is `Offloaded` (on a CPU-only machine measure cannot tell by the device)."""
    from dataclasses import replace

    from labkit.memory.accounting import measure as _measure
    b = _measure(model, optimizer, label=label)
    if isinstance(optimizer, Offloaded):
        b = replace(b, on_host=tuple(c for c in HOST_CATEGORIES if getattr(b, c)))
    return b
