"""The capstone's model: a small GPT with rotary positions, written for one device (layer 5).

Each block is a `labkit.models.Block` (so `labkit.tp.TPBlock` splits it as in module 06); its
attention core is a `RopeCore`, which rotates q and k by the positions this rank holds (RoPE,
Su et al. 2021, arXiv 2104.09864, eq. 34) and then runs causal attention: torch's on one device,
`labkit.cp.attention` (ring, zig-zag) when a CP group is given. RoPE needs no position table, so
context parallelism shards only the tokens, the labels and the position indices.
The output head is not tied to the embedding: the two live on different pipeline stages.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.models import Block, GPTConfig


@dataclass(frozen=True)
class Config:
    """The training run every layout must reproduce."""
    vocab: int = 256            # byte-level tokens
    seq: int = 16               # tokens per sequence (a multiple of 2 x cp for the zig-zag split)
    n_layer: int = 2            # transformer blocks (a multiple of pp)
    n_embd: int = 32            # hidden size (a multiple of tp)
    n_head: int = 4             # attention heads (a multiple of tp)
    batch: int = 8              # sequences per global batch (a multiple of dp x microbatches)
    microbatches: int = 2       # pipeline micro-batches per step, per DP rank
    steps: int = 3              # optimizer steps
    lr: float = 0.5             # SGD learning rate
    max_norm: float = 1.0       # gradient clipping to this global norm; None: no clipping
    seed: int = 0               # initial weights
    data_seed: int = 0          # which windows of the corpus each step reads
    checkpointing: bool = False # activation checkpointing of every block (recompute in backward)
    schedule: str = "1f1b"      # pipeline schedule: "1f1b" or "gpipe"


def rope(x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x (b, heads, s, d) rotated pairwise (i, i + d/2) by angle pos * base^(-2i/d)."""
    d = x.shape[-1]
    freqs = base ** (-torch.arange(0, d // 2, dtype=torch.float32, device=x.device) * 2 / d)
    ang = pos.to(torch.float32)[:, None] * freqs[None, :]            # (s, d/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class RopeCore:
    """The attention core of a block: RoPE at `positions`, then causal attention (over the CP
    group's ring when `cp_group` is given). One object shared by every block of a stage."""

    def __init__(self, positions: torch.Tensor, cp_group=None):
        self.positions, self.cp_group = positions, cp_group

    def __call__(self, q, k, v):
        q, k = rope(q, self.positions), rope(k, self.positions)
        if self.cp_group is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        from labkit.cp import attention
        return attention(q, k, v, group=self.cp_group, causal=True, method="ring", layout="zigzag")


class CapGPT(nn.Module):
    """Token embedding -> n_layer blocks (RoPE attention) -> final norm -> head."""

    def __init__(self, cfg: Config = Config()):
        super().__init__()
        self.cfg = cfg
        gcfg = GPTConfig(vocab_size=cfg.vocab, block_size=cfg.seq, n_layer=cfg.n_layer,
                         n_head=cfg.n_head, n_embd=cfg.n_embd, tie_weights=False)
        torch.manual_seed(cfg.seed)                    # the same weights on every rank
        self.tok = nn.Embedding(cfg.vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(gcfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        self.set_core(RopeCore(torch.arange(cfg.seq)))

    def set_core(self, core) -> None:
        for b in self.blocks:
            b.core = core

    def forward(self, idx):
        x = self.tok(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


class Stage(nn.Module):
    """One pipeline stage of a CapGPT: the embedding on the first, the norm and head on the last."""

    def __init__(self, tok, blocks, ln_f, head, checkpointing: bool = False):
        super().__init__()
        self.tok, self.blocks, self.ln_f, self.head = tok, nn.ModuleList(blocks), ln_f, head
        self.checkpointing = checkpointing

    def forward(self, x):
        if self.tok is not None:
            x = self.tok(x)
        for b in self.blocks:
            if self.checkpointing:
                from torch.utils.checkpoint import checkpoint
                x = checkpoint(b, x, use_reentrant=False)
            else:
                x = b(x)
        if self.head is not None:
            x = self.head(self.ln_f(x))
        return x


def cut(model: CapGPT, pp: int, stage: int):
    """(Stage, the indices of its blocks): the pipeline split first, as torchtitan does."""
    n = model.cfg.n_layer
    if n % pp:
        raise ValueError(f"n_layer ({n}) not divisible by pp ({pp}): pick pp among its divisors")
    per = n // pp
    idx = list(range(stage * per, (stage + 1) * per))
    last = stage == pp - 1
    return Stage(model.tok if stage == 0 else None, [model.blocks[i] for i in idx],
                 model.ln_f if last else None, model.head if last else None,
                 model.cfg.checkpointing), idx


def lm_loss(logits, targets):
    """Mean cross-entropy over every token given."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
