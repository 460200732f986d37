"""A Llama-style decoder written for one device, to be built on the meta device at full size.

The shapes are Llama 2's (Touvron et al. 2023, arXiv 2307.09288; the released configs):
7B: h 4096, 32 layers, 32 heads, FFN 11008; 70B: h 8192, 80 layers, 64 heads with 8 key/value
heads (grouped-query attention), FFN 28672; vocabulary 32000, output not tied. Rotary
embeddings are left out: they hold no parameters and do not change memory.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class LlamaConfig:
    dim: int = 4096             # hidden size h
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 32        # < n_heads: grouped-query attention
    ffn_dim: int = 11008        # SwiGLU inner size
    vocab_size: int = 32000

    @property
    def params(self) -> int:
        h, kv = self.dim, self.dim // self.n_heads * self.n_kv_heads
        block = 2 * h * h + 2 * h * kv + 3 * h * self.ffn_dim + 2 * h
        return 2 * self.vocab_size * h + self.n_layers * block + h

    @property
    def embed_params(self) -> int:
        """Embedding + output layer (sharded by data parallelism only in labkit's TP plan)."""
        return 2 * self.vocab_size * self.dim


LLAMA = {
    "7B": LlamaConfig(),
    "70B": LlamaConfig(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.head_dim = c.dim // c.n_heads
        kv = self.head_dim * c.n_kv_heads
        self.wq, self.wk, self.wv = (nn.Linear(c.dim, n, bias=False) for n in (c.dim, kv, kv))
        self.wo = nn.Linear(c.dim, c.dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (m(x).view(b, s, -1, self.head_dim).transpose(1, 2) for m in (self.wq, self.wk, self.wv))
        rep = q.shape[1] // k.shape[1]                     # this rank's query heads per kv head
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.w3 = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.w2 = nn.Linear(c.ffn_dim, c.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(c.dim), RMSNorm(c.dim)
        self.attention, self.feed_forward = Attention(c), FeedForward(c)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.config = c
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(LlamaBlock(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))
