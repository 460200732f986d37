"""A tensor-parallel transformer block, made from a single-device `labkit.toy_models.Block`.

    tp_block = TPBlock(block, group)           # attention heads and MLP columns split t ways
    y = tp_block(x)                            # x whole on every rank (b, s, h); y whole too
    TPBlock(block, group, sequence_parallel=True)(x_chunk)   # x, y: this rank's s / t positions

Per block, forward: f before QKV, g after the attention projection, f before fc, g after
fc_out - two all-reduces (g); backward: the two f's all-reduce - two more. Four in all
(Megatron-LM, arXiv 1909.08053, figure 4).
With sequence parallelism the layer norms and residual adds see 1/t of the sequence, so their
parameters' gradients are partial sums over the sequence: `sync_sequence_parallel_grads`
all-reduces them after backward (Megatron-LM does the same for its layer-norm weights).
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.i18n import N_, tr
from labkit.toy_models import Block
from labkit.tp.layers import ColumnParallelLinear, RowParallelLinear, shard_rows


class TPMLP(nn.Module):
    """fc (column parallel) -> GeLU on this rank's 4h / t columns -> fc_out (row parallel)."""

    def __init__(self, fc: nn.Linear, fc_out: nn.Linear, group=None, sequence_parallel=False,
                 impl: str = "ring"):
        super().__init__()
        kw = dict(group=group, sequence_parallel=sequence_parallel, impl=impl)
        self.fc = ColumnParallelLinear(fc, name=N_("MLP hidden size (fc)"), **kw)
        self.fc_out = RowParallelLinear(fc_out, name=N_("MLP hidden size (fc_out)"), **kw)

    def forward(self, x):
        return self.fc_out(F.gelu(self.fc(x)))


class TPAttention(nn.Module):
    """Causal self-attention with rank r computing heads r * a/t .. (r+1) * a/t - 1.
    `core(q, k, v)` is torch's fused attention (it keeps no s x s scores for backward); an
    instance attribute replaces it (labkit.toy_models.math_core keeps them)."""

    core = staticmethod(Block.core)

    def __init__(self, qkv: nn.Linear, proj: nn.Linear, n_head: int, group=None,
                 sequence_parallel=False, impl: str = "ring"):
        super().__init__()
        t = dist.get_world_size(group)
        shard_rows(n_head, t, 0, tr("number of attention heads"))      # heads split whole
        self.local_heads = n_head // t
        self.head_dim = qkv.in_features // n_head
        kw = dict(group=group, sequence_parallel=sequence_parallel, impl=impl)
        self.qkv = ColumnParallelLinear(qkv, parts=3, name=N_("attention width (qkv)"), **kw)
        self.proj = RowParallelLinear(proj, name=N_("attention width (proj)"), **kw)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        b, s = q.shape[:2]
        q, k, v = (z.view(b, s, self.local_heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = self.core(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))


class TPBlock(nn.Module):
    """labkit.toy_models.Block, tensor parallel over `group` (layer norms replicated)."""

    def __init__(self, block, group=None, sequence_parallel=False, impl: str = "ring"):
        super().__init__()
        kw = dict(group=group, sequence_parallel=sequence_parallel, impl=impl)
        self.group, self.sp = group, sequence_parallel
        self.ln1 = _copy(block.ln1)
        self.attn = TPAttention(block.qkv, block.proj, block.n_head, **kw)
        self.ln2 = _copy(block.ln2)
        self.mlp = TPMLP(block.fc, block.fc_out, **kw)
        if sequence_parallel:     # replicated parameters that see only this rank's positions
            for p in (*self.ln1.parameters(), *self.ln2.parameters(), self.attn.proj.bias,
                      self.mlp.fc_out.bias):
                if p is not None:
                    p.sequence_parallel = True

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def _copy(module: nn.Module) -> nn.Module:
    import copy
    return copy.deepcopy(module)


def sync_sequence_parallel_grads(model: nn.Module, group=None) -> None:
    """After backward with sequence parallelism: sum the gradients of replicated parameters
    (layer norms, row-parallel biases) over the TP group."""
    for p in model.parameters():
        if getattr(p, "sequence_parallel", False) and p.grad is not None:
            dist.all_reduce(p.grad, group=group)


def parallelize_blocks(blocks, group=None, sequence_parallel=False, impl: str = "ring"):
    """nn.Sequential of TPBlocks from an iterable of single-device Blocks."""
    return nn.Sequential(*(TPBlock(b, group, sequence_parallel, impl) for b in blocks))


def full_grad_slice(tp_module: nn.Module, name: str, full: torch.Tensor) -> torch.Tensor:
    """The part of a single-device tensor (weight or its grad) that parameter `name` of a
    TP module holds on this rank, to compare the two."""
    owner = tp_module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else tp_module
    leaf = name.rsplit(".", 1)[-1]
    if isinstance(owner, ColumnParallelLinear):
        return full[owner.rows]
    if isinstance(owner, RowParallelLinear) and leaf == "weight":
        return full[:, owner.cols]
    return full
