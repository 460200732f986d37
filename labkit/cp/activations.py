"""Activation memory of a whole transformer layer per rank under context parallelism, measured
by autograd's saved-tensor hooks (as labkit.memory.live's Meter and labkit.tp.parity count it:
each storage once, parameters left out) against Korthikanti et al.'s per-layer formula
(`labkit.memory.activations.per_layer`) with s replaced by s/cp.

The layer is labkit.toy_models.Block (fp32, no dropout) whose attention core is `labkit.cp.attention`:
each rank holds s/cp positions of the input and runs the layer on them alone; only attention
talks to the other ranks. Ring attention keeps no score matrix (like torch's fused kernel, it is
Korthikanti's "selective" case), so the formula is their 16 d s b h per layer (d = 4 bytes) with
s/cp, plus what this layer keeps that the formula does not name (L = this rank's positions):
    K and V made contiguous for the ring (its own block)   2 d L b h   (all-gather: 2 d s b h)
    attention's output, copied again as the projection's input   d L b h
    the log-sum-exp of each query row                            4 a L b
    the two layer norms' mean and 1/std                          16 L b
A dense layer (scores kept) would add d a s^2 b; the score matrix of a rank's queries against
every key is d a (s/cp) s b: ring attention never holds it, only one (s/cp) x (s/cp) block of it
at a time while it computes.
"""
import labkit
from labkit import trace
from labkit.memory.activations import per_layer


def formula(seq: int, cp: int, *, rank: int = 0, batch: int = 1, hidden: int = 64, heads: int = 4,
            method: str = "ring", layout: str = "contiguous", itemsize: int = 4) -> dict:
    """Bytes rank `rank` keeps for one layer: Korthikanti's selective term at s/cp (this rank's
    L positions), the extras above, and the score matrices for comparison. Pure arithmetic."""
    from labkit.cp.layout import local_len
    loc = local_len(seq, cp, rank, layout)
    kort = per_layer(loc, batch, hidden, heads, checkpointing="selective",
                     bytes_per_value=itemsize, dropout=False)
    kv = 2 * itemsize * (loc if method == "ring" else seq) * batch * hidden
    extra = kv + itemsize * loc * batch * hidden + 4 * heads * loc * batch + 16 * loc * batch
    return {"korthikanti s/cp": kort, "extras": extra, "total": kort + extra,
            "scores, own rows": itemsize * heads * loc * seq * batch,
            "scores, one block": itemsize * heads * loc * loc * batch,
            "scores, one device": itemsize * heads * seq * seq * batch}


def measure_layer(seq: int = 256, batch: int = 1, hidden: int = 64, heads: int = 4,
                  method: str = "ring", layout: str = "contiguous", group=None) -> dict:
    """On every rank of `group`: one forward of a whole layer on this rank's s/cp positions with
    attention under context parallelism. Returns the bytes kept for backward beside `formula`."""
    import torch
    import torch.distributed as dist
    from labkit.cp.block_stats import block_stats
    from labkit.cp.api import attention
    from labkit.cp.shard import shard_sequence
    from labkit.tp.parity import reference_blocks

    layer = reference_blocks(1, hidden, heads)[0].to(labkit.device())
    layer.core = lambda q, k, v: attention(q, k, v, group=group, causal=True, method=method,
                                           layout=layout)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq, hidden, generator=g).to(labkit.device())
    xin = shard_sequence(x, 1, group=group, layout=layout).clone().requires_grad_()
    with block_stats() as stats, trace.saved_bytes(exclude=layer.parameters(), per="storage") as saved:
        out = layer(xin)                                         # saved: each storage once
    cp, rank = dist.get_world_size(group), dist.get_rank(group)
    del out
    return {"seq": seq, "cp": cp, "rank": rank, "measured": saved.bytes,
            "largest score block": stats["largest block"] * batch * heads * 4,
            **formula(seq, cp, rank=rank, batch=batch, hidden=hidden, heads=heads, method=method,
                      layout=layout)}


def by_degree(seqs=(256, 512, 1024), degrees=(1, 2, 4), **kw) -> list:
    """`measure_layer` on groups of the first d ranks for each CP degree d and sequence length
    (every rank must call this: it makes the groups). Rank 0's rows, in order of (d, s)."""
    import torch.distributed as dist
    rows = []
    for d in degrees:
        grp = dist.new_group(list(range(d)))
        if dist.get_rank() < d:
            rows += [measure_layer(seq=s, group=grp, **kw) for s in seqs]
        dist.barrier()
    return rows
