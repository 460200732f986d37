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

import torch
from torch.utils.checkpoint import checkpoint

from labkit.toy_models import math_core  # attention that keeps its scores (labkit.toy_models)

MODES = ("none", "selective", "full")


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
        raise TypeError("apply() expects a labkit.toy_models.TinyGPT (a model with .blocks)")
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


def count_flops(mode: str, shape=None, seed: int = 0) -> dict:
    """FLOPs of one forward and one backward of the module's TinyGPT (math attention) with
    checkpointing `mode`, counted by torch's FlopCounterMode (matrix products: 2 per
    multiply-add): {"forward", "backward", "blocks_forward"}. What checkpointing recomputes
    runs during backward, so it shows in "backward"; "blocks_forward" is the forward FLOPs of
    the blocks alone (the most that full checkpointing can add). torch stops a recomputation as
    soon as every tensor backward needs is back (early stop), so an operation whose output
    backward does not need (a block's last matmul) is not run again."""
    from torch.utils.flop_counter import FlopCounterMode

    from labkit.toy_models import GPTConfig, TinyGPT, lm_loss, token_batch
    from labkit.tricks.formulas import Shape
    shape = shape or Shape()
    torch.manual_seed(seed)
    model = apply(TinyGPT(GPTConfig(**shape.gpt_kwargs())), mode)
    x, y = token_batch(shape.batch, shape.seq, shape.vocab_size, seed=seed)
    with FlopCounterMode(display=False) as fwd:
        loss = lm_loss(model(x), y)
    blocks = sum(v for k, per_op in fwd.get_flop_counts().items()
                 if k.count(".") == 2 and ".blocks." in k for v in per_op.values())
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    return {"forward": fwd.get_total_flops(), "backward": bwd.get_total_flops(), "blocks_forward": blocks}


def count_flops_modes(shape=None, modes=MODES) -> dict:
    """{mode: count_flops(mode, shape)} for each checkpointing mode (one call on a rank)."""
    return {mode: count_flops(mode, shape) for mode in modes}
