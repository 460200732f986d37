"""Toy models and data for the course (layer 5). Written for one device, like nanoGPT's:
parallelism is applied from outside by the strategies.

`AwkwardNet` carries the cases that break naive parallel code, for parity tests:
tied weights, a frozen parameter, a parameter unused in forward, a buffer, and sizes that do
not divide by the world size. `TinyGPT` is a small GPT-2-style transformer (tens of millions
of parameters at the course's settings) whose memory can be predicted to the byte.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


class AwkwardNet(nn.Module):
    """embed -> two uneven linear layers -> output tied to embed (the awkward cases).

    - ``head.weight is embed.weight`` (tied, one storage),
    - ``frozen`` has requires_grad=False,
    - ``unused`` is never used in forward (only if ``with_unused``; DDP must be told),
    - ``steps`` is a buffer.
    Sizes are odd (vocab 37, hidden 13, 19) so flat sizes do not divide by 2, 3 or 4 ranks.
    """

    def __init__(self, vocab: int = 37, dim: int = 13, hidden: int = 19, with_unused: bool = False):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.frozen = nn.Parameter(torch.randn(dim), requires_grad=False)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight                     # tied
        self.unused = nn.Parameter(torch.randn(5)) if with_unused else None
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.frozen
        x = x + self.fc2(torch.tanh(self.fc1(x)))
        return self.head(x)


def awkward_batch(batch: int, seq: int = 6, vocab: int = 37, seed: int = 0):
    """(tokens, targets) for AwkwardNet: next-token prediction on random tokens."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


@dataclass
class GPTConfig:
    """A GPT-2-style decoder. Defaults give ~29 M parameters (a course-sized model)."""
    vocab_size: int = 8192      # tokens
    block_size: int = 256       # longest sequence, tokens
    n_layer: int = 8            # transformer blocks
    n_head: int = 8             # attention heads per block
    n_embd: int = 512           # hidden size
    tie_weights: bool = True    # output head shares the token embedding (GPT-2 does)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.fc_out = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    @staticmethod
    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of (batch, heads, seq, head_dim) tensors. An instance attribute
        replaces it per block (labkit.tricks.checkpointing: attention that keeps its scores,
        or recomputes them)."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = self.core(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


def math_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention that keeps the s x s scores for backward (no fused kernel): a `Block.core`
    for the formula's case without recomputation (labkit.tricks.checkpointing, labkit.tp.parity)."""
    s = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=q.device), 1)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    return att @ v


class TinyGPT(nn.Module):
    def __init__(self, cfg: GPTConfig = GPTConfig()):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.head.weight = self.tok.weight
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def num_params(self) -> int:
        """Distinct parameters (a tied weight counts once), as the memory formulas count them."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())


def gpt_params(cfg: GPTConfig) -> int:
    """TinyGPT's parameter count from its config, without building it (12 L d^2 + ...)."""
    d, L, V, T = cfg.n_embd, cfg.n_layer, cfg.vocab_size, cfg.block_size
    per_block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    head = 0 if cfg.tie_weights else V * d
    return V * d + T * d + L * per_block + 2 * d + head


def token_batch(batch: int, seq: int, vocab: int, seed: int = 0):
    """(inputs, targets) of random tokens, for timing and memory runs."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


__all__ = ["AwkwardNet", "awkward_batch", "lm_loss", "GPTConfig", "TinyGPT", "gpt_params",
           "token_batch"]
