"""Activation checkpointing applied to a TinyGPT from outside (layer 3).

    labkit.tricks.checkpointing.apply(model, "full")        # or "selective", "none"

- attention that keeps its scores: `math_core` computes softmax(q k^T / sqrt(d)) v with the
  (b, heads, s, s) score matrix saved for backward, as Megatron's GPT does and as Korthikanti
  et al. count it (5 a s^2 b in 16-bit with dropout; d a s^2 b without). torch's
  `scaled_dot_product_attention` (TinyGPT's default core) never stores the scores: its fused
  kernel recomputes them in backward, which is selective recomputation built in.
- "selective" (Korthikanti et al., section 5): only the attention core runs under
  `torch.utils.checkpoint`, so its scores are recomputed in backward and the linear layers'
  inputs are kept. torch's `create_selective_checkpoint_contexts` generalises this to a policy
  per op (torchtitan saves the matmuls' outputs and recomputes the rest); a policy that saves
  every other op's output keeps more than no checkpointing at all (views and sums included:
  66 MB against 45 MB measured on the course's model), so the policy must be chosen with care.
- "full": each block runs under `torch.utils.checkpoint`; only its input is kept and the
  whole block's forward runs again in backward (one extra forward: about +1/3 of the compute).
"""
import functools
import math

import torch
from torch.utils.checkpoint import checkpoint

MODES = ("none", "selective", "full")


def math_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention that keeps the s x s scores for backward (no fused kernel)."""
    s = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), 1)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    return att @ v


def _checkpointed_core(q, k, v):
    return checkpoint(math_core, q, k, v, use_reentrant=False)


def _checkpointed_forward(block, x):
    return checkpoint(block.__class__.forward, block, x, use_reentrant=False)


def apply(model: torch.nn.Module, mode: str = "full", attention: str = "math") -> torch.nn.Module:
    """Set each block's attention core and checkpointing, in place; returns the model.

    attention: 'math' (scores kept, the formula's case) or 'sdpa' (torch's fused kernel)."""
    if mode not in MODES:
        raise ValueError(f"checkpointing mode must be one of {MODES}, got {mode!r}")
    if attention not in ("math", "sdpa"):
        raise ValueError(f"attention must be 'math' or 'sdpa', got {attention!r}")
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise TypeError("apply() expects a labkit.models.TinyGPT (a model with .blocks)")
    for block in blocks:
        for name in ("core", "forward"):
            block.__dict__.pop(name, None)                 # undo an earlier apply()
        if attention == "math":
            block.core = math_core
        if mode == "selective":
            block.core = _checkpointed_core if attention == "math" else block.core
        elif mode == "full":
            block.forward = functools.partial(_checkpointed_forward, block)
    model.checkpointing = mode
    return model
