"""Attention of a block of queries on a block of keys, returning its log-sum-exp, the merge of
two partial results (online softmax), and the backward of one block. One process, no
communication: `ring.py` and `allgather.py` call these on the blocks they hold.

A partial result on a block of keys K_j is o_j = softmax(s_j) V_j with s_j = q K_j^T / sqrt(d),
and its log-sum-exp l_j = log sum_k exp(s_jk). Two partial results on disjoint key blocks merge
into the result on their union (Milakov & Gimelshein 2018; Liu et al. 2023, ring attention):

    l = log(exp(l_a) + exp(l_b))
    o = exp(l_a - l) o_a + exp(l_b - l) o_b

A query row that sees no key of a block has l = -inf and o = 0; it adds nothing to a merge.
Tensors are (batch, heads, positions, head_dim); positions are global (1-D int64 tensors), so a
causal mask is key position > query position, whatever the layout.

Each block is a "block" span of labkit.trace (its score entries per batch and head as a tag),
kept only while a recorder is on: labkit.cp.block_stats reads them from outside.
"""
import math

import torch

from labkit import trace


def expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """K or V with h_kv heads repeated for `heads` query heads (grouped-query attention: query
    head i reads K/V head i // (heads / h_kv), as sdpa's enable_gqa)."""
    g = heads // x.shape[1]
    return x if g == 1 else x.repeat_interleave(g, dim=1)


def fold_kv(dx: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """The gradient of `expand_kv`: sum the query heads that shared a K/V head."""
    b, h, s, d = dx.shape
    return dx if h == kv_heads else dx.view(b, kv_heads, h // kv_heads, s, d).sum(2)


def _mask(qpos, kpos, causal):
    if not causal:
        return None
    m = kpos[None, :] > qpos[:, None]
    return m if bool(m.any()) else None


def _safe(lse):
    return torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)


def attend(q, k, v, qpos, kpos, causal: bool):
    """(o, lse) of queries q (positions qpos) on keys k, values v (positions kpos); k, v may
    have fewer heads (GQA)."""
    t0 = trace.stamp("block")
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))
    m = _mask(qpos, kpos, causal)
    if m is not None:
        s = s.masked_fill(m, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.exp(s - _safe(lse)[..., None]) @ v
    trace.add("block", t0, entries=s.shape[-1] * s.shape[-2])
    return o, lse


def merge(o_a, lse_a, o_b, lse_b):
    """The result on the union of two disjoint key blocks, from the two partial results."""
    lse = torch.logaddexp(lse_a, lse_b)
    safe = _safe(lse)
    wa, wb = torch.exp(lse_a - safe), torch.exp(lse_b - safe)
    return wa[..., None] * o_a + wb[..., None] * o_b, lse


def merge_into(acc, o_b, lse_b, merge_fn=merge):
    """acc = (o, lse) or None; returns the merged pair."""
    return (o_b, lse_b) if acc is None else merge_fn(acc[0], acc[1], o_b, lse_b)


def attend_backward(q, k, v, do, lse, delta, qpos, kpos, causal: bool):
    """dq, dk, dv of one block, given the final log-sum-exp of each query row (lse) and
    delta = rowsum(dO * O). dk, dv have k's heads (summed over the query heads sharing them)."""
    t0 = trace.stamp("block")
    kv_heads, scale = k.shape[1], 1.0 / math.sqrt(q.shape[-1])
    ke, ve = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    s = q @ ke.transpose(-1, -2) * scale
    m = _mask(qpos, kpos, causal)
    if m is not None:
        s = s.masked_fill(m, float("-inf"))
    p = torch.exp(s - _safe(lse)[..., None])
    dv = p.transpose(-1, -2) @ do
    ds = p * (do @ ve.transpose(-1, -2) - delta[..., None])
    dq = ds @ ke * scale
    dk = ds.transpose(-1, -2) @ q * scale
    trace.add("block", t0, entries=s.shape[-1] * s.shape[-2])
    return dq, fold_kv(dk, kv_heads), fold_kv(dv, kv_heads)
