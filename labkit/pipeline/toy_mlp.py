"""The course's pipeline model: one single-device network, cut into stages from outside.

    model = mlp(layers=8, width=64)             # nn.Sequential of blocks, layer 1 frozen
    parts = split(model, 4)                     # [blocks 0-1, 2-3, 4-5, 6-7]
    parts = split(model, 4, sizes=[3, 1, 2, 2]) # an uneven cut (rebalancing a slow stage)

Written for one device (torchtitan's rule): pipelining is applied by cutting the Sequential.
The loss of a micro-batch is its mean squared error divided by m, so the gradients summed
over micro-batches equal one process's gradient of the full batch's mean loss.
"""
import torch
from torch import nn

__all__ = ["mlp", "split", "batch", "reference_grads", "microbatch_loss"]


class Block(nn.Module):
    """Linear, then tanh, with a residual: y = x + tanh(W x + b)."""

    def __init__(self, width: int):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.lin(x))


def mlp(layers: int = 8, width: int = 64, seed: int = 0, frozen: int = 1) -> nn.Sequential:
    """`layers` residual blocks of `width`; block `frozen` (None for none) does not train, as a
    frozen layer in fine-tuning: its parameters keep grad None on every stage."""
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(*[Block(width) for _ in range(layers)])
    with torch.no_grad():
        for p in model.parameters():
            # drawn on the CPU generator (same weights on every rank), copied onto p's device
            p.copy_(torch.randn(p.shape, generator=g, device="cpu") * (0.5 / width ** 0.5))
    if frozen is not None and frozen < layers:
        model[frozen].requires_grad_(False)
    return model


def split(model: nn.Sequential, parts: int, sizes=None) -> list:
    """Cut a Sequential into `parts` consecutive Sequentials (equal, or `sizes` blocks each);
    parameters keep their names in the full model ("3.lin.weight")."""
    n = len(model)
    if sizes is None:
        if n % parts:
            raise ValueError(f"{n} layers do not split into {parts} equal stages: give sizes=[...] "
                             f"(a list of {parts} layer counts that adds up to {n})")
        sizes = [n // parts] * parts
    if len(sizes) != parts or sum(sizes) != n or min(sizes) < 1:
        raise ValueError(f"sizes={list(sizes)} must be {parts} counts >= 1 adding up to {n} layers")
    out, start = [], 0
    for k in sizes:
        part = nn.Sequential()
        for i in range(start, start + k):
            part.add_module(str(i), model[i])
        out.append(part)
        start += k
    return out


def batch(size: int = 32, width: int = 64, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, width, generator=g, device="cpu")   # CPU generator: same batch on every rank
    return x, torch.sin(x)


def microbatch_loss(out, y, microbatches: int):
    return torch.nn.functional.mse_loss(out, y) / microbatches


def reference_grads(model: nn.Module, x, y) -> dict:
    """One process, the whole batch: {name: grad} (None for frozen parameters), and the loss."""
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    grads = {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads, float(loss.detach())
