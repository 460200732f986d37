"""Run on every rank: a traced ring-attention step (its timeline), transfer and compute rates
(the block size where transfer hides behind compute), and the largest score block a rank holds.

    cluster.run(labkit.cp.runs.traced_step, seq=512, heads=8, head_dim=16)   # -> per rank events
"""
import time

import torch
import torch.distributed as dist

from labkit import trace
from labkit.cp import blocks as B
from labkit.cp import ring
from labkit.cp.block_stats import block_stats
from labkit.cp.api import attention
from labkit.cp.parity import qkv
from labkit.cp.shard import group_info, shard_sequence


def traced_step(seq=512, causal=True, method="ring", layout="zigzag", batch=1, heads=8,
                kv_heads=None, head_dim=16, group=None, live=False) -> dict:
    """One forward and backward; this rank's compute, transfer and wait intervals on the
    machine's wall clock (seconds), measured after a warm-up step and a barrier. live=True also
    sends them to the notebook after forward and after backward (labkit.cp.overlap.LiveTimeline draws them)."""
    q, k, v = qkv(batch, heads, kv_heads, seq, head_dim)
    parts = [shard_sequence(t, 2, group=group, layout=layout).requires_grad_() for t in (q, k, v)]
    attention(*parts, group=group, causal=causal, method=method, layout=layout).sum().backward()  # warm
    dist.barrier(group=group)
    ring.reset()
    ring.LIVE = live
    try:
        with trace.recording(ring.RECORDER), block_stats() as stats:
            out = attention(*parts, group=group, causal=causal, method=method, layout=layout)
            ring.flush()                      # between forward and backward, outside autograd
            out.sum().backward()
        ring.flush()
    finally:
        ring.LIVE = False
    events = ring.to_wall(ring.TRACE)
    return {"events": events, "largest block": stats["largest block"],
            "compute seconds": stats["compute seconds"]}


def rates(block=64, batch=1, heads=8, head_dim=16, repeats=5, group=None) -> dict:
    """Seconds per K/V block sent to the next rank (no compute running) and seconds of one
    block's attention (block x block scores), best of `repeats`, for blocks of `block` positions."""
    r, n, nxt, prv = group_info(group)
    q, k, v = qkv(batch, heads, None, block, head_dim)
    kv = torch.stack([k, v]).contiguous()
    buf = torch.empty_like(kv)
    pos = torch.arange(block, device=q.device)
    send = comp = float("inf")
    for _ in range(repeats):
        dist.barrier(group=group)
        t0 = time.perf_counter()
        reqs = [dist.irecv(buf, prv, group=group), dist.isend(kv, nxt, group=group)]
        for x in reqs:
            x.wait()
        send = min(send, time.perf_counter() - t0)
        t0 = time.perf_counter()
        B.attend(q, k, v, pos, pos + block, causal=False)
        comp = min(comp, time.perf_counter() - t0)
    return {"block": block, "transfer s": send, "compute s": comp,
            "kv bytes": kv.numel() * kv.element_size()}


def crossover(rate_rows: list) -> float:
    """The block size where one block's compute time equals its transfer time, from `rates`
    measured at several block sizes: transfer grows like L (bytes), compute like L^2 (scores).
    Fits t_transfer = a + b L and t_compute = c L^2 and solves c L^2 = a + b L."""
    import numpy as np
    L = np.array([r["block"] for r in rate_rows], dtype=float)
    b, a = np.polyfit(L, [r["transfer s"] for r in rate_rows], 1)
    c = float(np.sum(np.array([r["compute s"] for r in rate_rows]) * L ** 2) / np.sum(L ** 4))
    return float((b + np.sqrt(b * b + 4 * c * max(a, 0.0))) / (2 * c))


def largest_scores(seq=256, method="ring", layout="contiguous", causal=False, batch=1, heads=4,
                   head_dim=16, group=None) -> int:
    """The most score entries one rank held at once (one attend call), per batch and head."""
    q, k, v = qkv(batch, heads, None, seq, head_dim)
    parts = [shard_sequence(t, 2, group=group, layout=layout) for t in (q, k, v)]
    with block_stats() as stats:
        attention(*parts, group=group, causal=causal, method=method, layout=layout)
    return stats["largest block"]


def largest_scores_by_degree(seq=256, degrees=(1, 2, 4), method="ring", heads=4, head_dim=16,
                             layout="contiguous") -> dict:
    """The largest score block (entries per batch and head) on rank 0 of groups of the first d
    ranks, for each context-parallel degree d (every rank must call this: it makes the groups)."""
    out = {}
    for d in degrees:
        grp = dist.new_group(list(range(d)))
        if dist.get_rank() < d:
            out[d] = largest_scores(seq=seq, method=method, heads=heads, head_dim=head_dim, group=grp,
                                    layout=layout)
        dist.barrier()
    return out
