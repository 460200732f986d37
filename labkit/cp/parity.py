"""Run on every rank: context-parallel attention against one process's attention on the full
sequence, and its bytes on the wire against `labkit.cp.formulas.wire`.

    cluster.run(labkit.cp.parity.attention_parity, seq=13, causal=True, method="ring",
                layout="zigzag", heads=4, kv_heads=2)     # -> max |diff| of out, dq, dk, dv
"""
import torch

import labkit
import torch.distributed as dist

from labkit import trace
from labkit.comm import traffic
from labkit.cp import blocks as B
from labkit.cp.allgather import AllGatherAttention
from labkit.cp.block_stats import block_stats
from labkit.cp.api import attention, reference
from labkit.cp.ring import RingAttention
from labkit.cp.formulas import wire
from labkit.cp.shard import agree, gather_sequence, shard_sequence


def qkv(batch=2, heads=4, kv_heads=None, seq=16, head_dim=8, seed=0, dtype=torch.float32):
    """The full q, k, v (same on every rank: a fixed CPU generator)."""
    g = torch.Generator().manual_seed(seed)
    kvh = kv_heads or heads
    dev = labkit.device()
    return (torch.randn(batch, heads, seq, head_dim, generator=g, dtype=dtype).to(dev),
            torch.randn(batch, kvh, seq, head_dim, generator=g, dtype=dtype).to(dev),
            torch.randn(batch, kvh, seq, head_dim, generator=g, dtype=dtype).to(dev))


# Derived, not tuned (labkit.numerics.chain_bound): the reductions of one attention forward and
# backward, summed in another order when the sequence is split over the ranks (chunks, then the
# log-sum-exp merge or the ring's accumulation) than on one process. SCALE bounds every value
# compared: tests/cp/test_cp.py checks it on one process (qkv's and the random dout's sizes).
SCALE = 16.0


def attention_tolerance(seq, heads=4, kv_heads=None, head_dim=8, n=4) -> float:
    """The most `attention_parity`'s differences may be on any CPU (fp32): forward the scores
    (head_dim), the softmax's max and sum over seq (+ the merge of n chunks), the output's sum
    over seq; backward dv over seq and the query heads sharing a K/V head (heads / kv_heads),
    dP (head_dim), the softmax's row term (head_dim), dq and dk over seq (and the heads), and
    the ring's accumulation of n chunks."""
    from labkit.numerics import chain_bound
    group = heads // (kv_heads or heads)
    d = head_dim
    return chain_bound([d, seq + n, seq, seq, group, d, d, seq, seq, group, n + 1], SCALE)


def ulysses_tolerance(seq, head_dim=16) -> float:
    """The most `labkit.cp.ulysses.ulysses_traffic`'s output may differ from one process's
    (fp32): each rank runs the same attention on its heads over the whole sequence, blocked
    differently for another number of heads (forward only): the scores (head_dim), the
    softmax's max and sum over seq, the output's sum over seq. SCALE as above (checked on one
    process for Ulysses' shapes too)."""
    from labkit.numerics import chain_bound
    return chain_bound([head_dim, seq, seq, seq], SCALE)


def attention_parity(seq=16, causal=False, method="ring", layout="contiguous", batch=2, heads=4,
                     kv_heads=None, head_dim=8, group=None, merge_fn=B.merge) -> dict:
    """Max |diff| of this rank's output and of the full dq, dk, dv against one process."""
    q, k, v = qkv(batch, heads, kv_heads, seq, head_dim)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = reference(*full, causal=causal)
    g = torch.Generator().manual_seed(1)
    dout = torch.randn(ref.shape, generator=g).to(ref.device)
    ref.backward(dout)
    parts = [shard_sequence(t, 2, group=group, layout=layout).requires_grad_() for t in (q, k, v)]
    out = attention(*parts, group=group, causal=causal, method=method, layout=layout, merge_fn=merge_fn)
    out.backward(shard_sequence(dout, 2, group=group, layout=layout))
    res = {"out": (out - shard_sequence(ref, 2, group=group, layout=layout)).abs().max().item()}
    for name, p, f in zip(("dq", "dk", "dv"), parts, full):
        got = gather_sequence(p.grad, 2, group=group, layout=layout)
        res[name] = (got - f.grad).abs().max().item()
    return res


def attention_traffic(seq=64, causal=True, method="ring", layout="contiguous", batch=1, heads=4,
                      kv_heads=None, head_dim=16, group=None) -> dict:
    """Bytes this rank's sockets carried in one forward and one backward, beside the formula."""
    q, k, v = qkv(batch, heads, kv_heads, seq, head_dim)
    parts = [shard_sequence(t, 2, group=group, layout=layout).requires_grad_() for t in (q, k, v)]
    with traffic.measure(sync=True, group=group) as check:      # the shapes every rank agrees on
        full_len = agree(*parts, group=group, causal=causal, method=method, layout=layout)
    fn = RingAttention if method == "ring" else AllGatherAttention
    with traffic.measure(sync=True, group=group) as fwd:
        out = fn.apply(*parts, group, causal, layout, full_len, B.merge)
    dout = torch.ones_like(out)
    with traffic.measure(sync=True, group=group) as bwd:
        out.backward(dout)
    dist.barrier(group=group)
    n, r = dist.get_world_size(group), dist.get_rank(group)
    want = wire(seq, n, r, method=method, batch=batch, kv_heads=kv_heads or heads,
                head_dim=head_dim, itemsize=4, layout=layout)
    return {"forward": fwd.sent, "backward": bwd.sent, "formula": want,
            "payload": (fwd.payload_sent, bwd.payload_sent), "shape check": check.sent}


def attention_work(seq=64, causal=True, method="ring", layout="contiguous", batch=1, heads=4,
                   head_dim=16, repeats=3, group=None) -> dict:
    """Score entries this rank computed in one forward (per batch and head, to set beside
    `labkit.cp.layout.scores_computed`) and its compute seconds (best of `repeats`)."""
    q, k, v = qkv(batch, heads, None, seq, head_dim)
    parts = [shard_sequence(t, 2, group=group, layout=layout) for t in (q, k, v)]
    best = None
    for _ in range(repeats):
        with block_stats() as stats:
            attention(*parts, group=group, causal=causal, method=method, layout=layout)
        secs = stats["compute seconds"]
        best = secs if best is None else min(best, secs)
    return {"score entries": stats["score entries"],
            "compute seconds": best}


def saved_for_backward(seq=64, method="ring", layout="contiguous", causal=True, batch=1, heads=4,
                       kv_heads=None, head_dim=16, group=None) -> dict:
    """Bytes of the tensors attention keeps for backward on this rank (autograd's saved-tensor
    hooks see every one), beside `labkit.cp.formulas.saved_bytes`."""
    from labkit.cp.formulas import saved_bytes
    q, k, v = qkv(batch, heads, kv_heads, seq, head_dim)
    parts = [shard_sequence(t, 2, group=group, layout=layout).requires_grad_() for t in (q, k, v)]
    with trace.saved_bytes(per="save") as saved:              # every saved tensor, each time
        attention(*parts, group=group, causal=causal, method=method, layout=layout)
    n, r = dist.get_world_size(group), dist.get_rank(group)
    return {"measured": saved.bytes, "formula": saved_bytes(seq, n, r, method=method, batch=batch,
            heads=heads, kv_heads=kv_heads or heads, head_dim=head_dim, layout=layout)}
