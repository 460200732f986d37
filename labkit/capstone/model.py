"""The capstone's model: labkit.toy_models.TinyGPT on bytes, and its cut into pipeline stages.

    cfg = Config()                       # 4 blocks of width 32, 4 heads, 16 bytes per row
    model = build(cfg)                   # the same weights on every rank (seeded)
    stage = stage_of(model, pp=2, stage=0, tp_group=g)   # embeddings + blocks 0-1, TP over g

The head is not tied to the embedding (they live on different stages).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn

__all__ = ["Config", "build", "stage_of", "Stage"]


@dataclass(frozen=True)
class Config:
    n_layer: int = 4            # transformer blocks (a multiple of pp)
    n_embd: int = 32            # hidden size (a multiple of tp)
    n_head: int = 4             # attention heads (a multiple of tp)
    seq: int = 16               # bytes per row
    batch: int = 8              # rows per global batch (a multiple of dp x microbatches)
    microbatches: int = 2       # per DP rank, per step
    lr: float = 0.5             # SGD
    max_norm: float = 0.5       # gradient clipping (below the gradient's norm: it clips)
    seed: int = 0
    vocab: int = 256            # bytes


def build(cfg: Config) -> nn.Module:
    """TinyGPT(vocab 256, untied), weights from cfg.seed: identical on every rank."""
    from labkit.toy_models import GPTConfig, TinyGPT
    torch.manual_seed(cfg.seed)
    return TinyGPT(GPTConfig(vocab_size=cfg.vocab, block_size=cfg.seq, n_layer=cfg.n_layer,
                             n_head=cfg.n_head, n_embd=cfg.n_embd, tie_weights=False))


class Stage(nn.Module):
    """One pipeline stage of TinyGPT: (tok, pos) on the first, its blocks, (ln_f, head) on the
    last. forward(x): token ids on the first stage, else the previous stage's activations."""

    def __init__(self, model, blocks, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        self.sp_slice = None        # sequence parallelism: this TP rank's positions after the embedding
        if first:
            self.tok, self.pos = model.tok, model.pos
        self.blocks = nn.ModuleList(blocks)
        if last:
            self.ln_f, self.head = model.ln_f, model.head

    def forward(self, x):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.size(1), device=x.device))
            if self.sp_slice is not None:
                x = x[:, self.sp_slice]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x)) if self.last else x


def stage_of(model, pp: int, stage: int, tp_group=None, sequence_parallel: bool = False) -> Stage:
    """Stage `stage` of `pp` (the pipeline split first), its blocks then tensor parallel over
    `tp_group` (labkit.tp.TPBlock; None or a group of one rank: left whole). sequence_parallel:
    TPBlock's sequence parallelism; the first stage keeps this TP rank's s / t positions of the
    embedding's output, every stage then passes s / t positions on."""
    import torch.distributed as dist
    from labkit.i18n import tr
    n = len(model.blocks)
    if n % pp:
        raise ValueError(tr("{n} blocks do not split into pp = {pp} equal stages; pick pp among "
                            "the divisors of {n}", n=n, pp=pp))
    per = n // pp
    blocks = list(model.blocks[stage * per:(stage + 1) * per])
    if tp_group is not None and dist.get_world_size(tp_group) > 1:
        from labkit.tp import TPBlock
        blocks = [TPBlock(b, tp_group, sequence_parallel=sequence_parallel) for b in blocks]
    out = Stage(model, blocks, stage == 0, stage == pp - 1)
    if sequence_parallel and tp_group is not None and dist.get_world_size(tp_group) > 1:
        t, r = dist.get_world_size(tp_group), dist.get_rank(tp_group)
        k = model.pos.num_embeddings // t
        out.sp_slice = slice(r * k, (r + 1) * k)
    return out


def tp_replicated(stage: nn.Module) -> dict:
    """{id(param): True} for the parameters every TP rank holds whole (embeddings, layer norms,
    row-parallel biases, the head), False for the split ones: labkit.tp.layers.replicated."""
    from labkit.tp.layers import replicated
    return replicated(stage)
