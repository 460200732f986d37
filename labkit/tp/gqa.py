"""Grouped-query attention (GQA, Ainslie et al. 2023) split over more ranks than it has K/V heads.

    ref = GQAttention(n_embd=64, n_head=8, n_kv_head=2)      # one device: 4 query heads per K/V head
    tp = TPGQAttention(ref, group)                          # t = 4 ranks: each K/V head on 2 ranks
    tp(x).sum().backward(); sync_kv_replica_grads(tp)       # sum the replicas' K/V gradients

Query heads are split as in any TP attention: rank r computes heads r*a/t .. (r+1)*a/t - 1.
Each query head h reads K/V head h // (a / kv). With t <= kv each rank holds kv/t K/V heads (an
ordinary column split). With t > kv there is not a K/V head per rank: the K/V head a rank needs
is copied to t/kv ranks (replicated, as vLLM and Megatron-core do when the TP degree exceeds the
number of query groups). Each replica then sees only its own query heads' share of the gradient,
so after backward the replicas' K/V weight gradients are summed over the t/kv ranks that share
them (`sync_kv_replica_grads`); without it they would drift apart. The input's gradient needs
nothing new: f all-reduces it, and each replica added only its own query heads' part.
"""
import torch

import labkit
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.i18n import N_, tr
from labkit.tp import comms
from labkit.tp.layers import RowParallelLinear, shard_rows


class GQAttention(nn.Module):
    """Causal grouped-query attention on one device (no biases, as Llama)."""

    def __init__(self, n_embd=64, n_head=8, n_kv_head=2):
        super().__init__()
        if n_head % n_kv_head:
            raise ValueError(f"n_head ({n_head}) must be a multiple of n_kv_head ({n_kv_head})")
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, n_embd // n_head
        self.q = nn.Linear(n_embd, n_embd, bias=False)
        self.k, self.v = (nn.Linear(n_embd, n_kv_head * self.head_dim, bias=False) for _ in range(2))
        self.proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x):
        return _attend(self.q(x), self.k(x), self.v(x), self.head_dim, self.proj)


def _attend(q, k, v, head_dim, proj):
    b, s = q.shape[:2]
    q, k, v = (z.view(b, s, -1, head_dim).transpose(1, 2) for z in (q, k, v))
    rep = q.shape[1] // k.shape[1]                    # query heads per K/V head, on this rank
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return proj(y.transpose(1, 2).reshape(b, s, -1))


def kv_heads_of_rank(n_head: int, n_kv_head: int, t: int, r: int) -> range:
    """The K/V heads rank r's query heads read (pure arithmetic)."""
    shard_rows(n_head, t, r, tr("number of query heads"))
    if t <= n_kv_head:
        s = shard_rows(n_kv_head, t, r, tr("number of K/V heads"))
        return range(s.start, s.stop)
    if t % n_kv_head:
        raise ValueError(tr("the TP degree ({t}) exceeds the K/V heads ({kv}) but is not a "
                            "multiple of them: each K/V head must be copied to the same number of "
                            "ranks; pick t in {choices}", t=t, kv=n_kv_head,
                            choices=[n_kv_head * i for i in range(1, n_head // n_kv_head + 1)]))
    j = r // (t // n_kv_head)
    return range(j, j + 1)


class TPGQAttention(nn.Module):
    """`GQAttention` over the TP group: query heads split, K/V heads split or replicated."""

    def __init__(self, ref: GQAttention, group=None):
        super().__init__()
        t, r = dist.get_world_size(group), dist.get_rank(group)
        hd = self.head_dim = ref.head_dim
        self.group, self.replicas = group, max(1, t // ref.n_kv_head)
        qs = shard_rows(ref.n_head, t, r, tr("number of query heads"))
        self.kv = kv_heads_of_rank(ref.n_head, ref.n_kv_head, t, r)
        rows_q = slice(qs.start * hd, qs.stop * hd)
        self.kv_rows = slice(self.kv.start * hd, self.kv.stop * hd)
        self.wq = nn.Parameter(ref.q.weight.detach()[rows_q].clone())
        self.wk = nn.Parameter(ref.k.weight.detach()[self.kv_rows].clone())
        self.wv = nn.Parameter(ref.v.weight.detach()[self.kv_rows].clone())
        self.proj = RowParallelLinear(ref.proj, group, name=N_("attention width (proj)"))
        self.rows_q = rows_q
        self.kv_group = None
        if self.replicas > 1:                 # every rank builds every replica group, in order
            ranks = dist.get_process_group_ranks(group) if group is not None else list(range(t))
            for j in range(ref.n_kv_head):
                g = dist.new_group(ranks[j * self.replicas:(j + 1) * self.replicas])
                if j == self.kv.start:
                    self.kv_group = g

    def forward(self, x):
        x = comms.copy_to_tp(x, self.group)
        return _attend(F.linear(x, self.wq), F.linear(x, self.wk), F.linear(x, self.wv),
                       self.head_dim, self.proj)


def sync_kv_replica_grads(model: nn.Module) -> int:
    """After backward: sum each replicated K/V weight's gradient over the ranks holding it.
    Returns the number of all-reduces made on this rank (0 when no K/V head is replicated)."""
    calls = 0
    for m in model.modules():
        if isinstance(m, TPGQAttention) and m.kv_group is not None:
            for p in (m.wk, m.wv):
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=m.kv_group)
                    calls += 1
    return calls


# Derived, not tuned (labkit.numerics.chain_bound): the reductions along one forward and
# backward of the attention, each summed in another order on the ranks (split over heads, then
# the all-reduce; the K/V replicas' gradients summed). GQA_SCALE bounds every value compared:
# tests/tp/test_tp_vocab.py checks it on one process (16.0 with one K/V head, 11.2 with two).
GQA_SCALE = 32.0


def gqa_tolerance(n_embd=64, n_head=8, n_kv_head=2, b=2, s=8, t=4) -> float:
    """The most `gqa_parity`'s differences (sync=True) may be on any CPU (fp32): forward the
    q, k, v projections (h), the scores (head size), softmax and attention (s each), proj (h);
    backward proj's transpose (h), the attention and scores again, the query heads sharing a
    K/V head (n_head / n_kv_head), the projections' transposes (3 h), the weight gradients'
    sums over b s tokens and the replicas' sum (up to t)."""
    from labkit.numerics import chain_bound
    h, hd = n_embd, n_embd // n_head
    forward = [h, hd, 2 * s, s, h]
    backward = [h, s, hd, 2 * s, n_head // n_kv_head, 3 * h, b * s, t]
    return chain_bound(forward + backward, GQA_SCALE)


def gqa_parity(n_embd=64, n_head=8, n_kv_head=2, b=2, s=8, sync=True, group=None) -> dict:
    """Max |diff| of output, input grad and the q, k, v, proj weight grads against one device.
    sync=False skips the replicas' gradient sum, to see what it is for."""
    torch.manual_seed(0)
    ref = GQAttention(n_embd, n_head, n_kv_head)
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(b, s, n_embd, generator=g).to(labkit.device()), torch.randn(b, s, n_embd, generator=g).to(labkit.device())
    tp = TPGQAttention(ref, group)
    xr, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    yr = ref(xr)
    (yr * w).sum().backward()
    y = tp(xt)
    (y * w).sum().backward()
    calls = sync_kv_replica_grads(tp) if sync else 0
    return {"output": (y - yr).abs().max().item(), "input grad": (xt.grad - xr.grad).abs().max().item(),
            "q grad": (tp.wq.grad - ref.q.weight.grad[tp.rows_q]).abs().max().item(),
            "k grad": (tp.wk.grad - ref.k.weight.grad[tp.kv_rows]).abs().max().item(),
            "v grad": (tp.wv.grad - ref.v.weight.grad[tp.kv_rows]).abs().max().item(),
            "proj grad": (tp.proj.weight.grad - ref.proj.weight.grad[:, tp.proj.cols]).abs().max().item(),
            "kv heads": list(tp.kv), "replicas": tp.replicas, "sync all-reduces": calls}
