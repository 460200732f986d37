"""Ulysses attention (DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509; Megatron's
cp_comm_type="a2a"): two all-to-alls swap sequence sharding for head sharding and back.

    cluster.run(labkit.cp.ulysses.ulysses_traffic, seq=64)   # bytes sent and max |diff|, this rank

Each rank holds all heads of s/N positions (contiguous layout). The first all-to-all sends head
group j of its q, k and v (h/N query heads, h_kv/N K/V heads) to rank j, so rank j ends with its
heads for every position: ordinary attention on the full sequence, any mask. The second
all-to-all sends each rank's positions of the output back. N must divide h_kv (N <= h_kv): the
degree is capped by the K/V heads. Bytes per rank: `labkit.cp.formulas.ulysses_wire`, constant
when N grows with s; the ring's grow with s whatever N is. Forward only here (the course's
parity and bytes; backward is the same two all-to-alls reversed).
"""
import torch
import torch.distributed as dist

from labkit.cp.api import reference
from labkit.i18n import tr


def _a2a(chunks: list, group) -> list:
    """Equal-size all-to-all: chunks[j] (flat, same numel) goes to rank j; returns what came
    from each rank, in rank order. One call of dist.all_to_all_single."""
    send = torch.stack(chunks).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return list(recv)


def ulysses_attention(q, k, v, *, group=None, causal=False):
    """This rank's output block (b, h, s/N, d) for its blocks of q (b, h, s/N, d) and k, v
    (b, h_kv, s/N, d), contiguous layout, every rank's block the same length."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    b, h, sl, d = q.shape
    hkv = k.shape[1]
    if h % n or hkv % n:
        raise ValueError(tr("Ulysses on rank {rank}: {n} ranks must divide the {h} query heads and the "
                            "{hkv} K/V heads (each rank takes h/N of them): use a CP degree that divides "
                            "{hkv}, or ring attention", rank=dist.get_rank(), n=n, h=h, hkv=hkv))
    hq, hk = h // n, hkv // n
    chunks = [torch.cat([t[:, j * hh:(j + 1) * hh].reshape(-1) for t, hh in ((q, hq), (k, hk), (v, hk))])
              for j in range(n)]
    got = _a2a(chunks, group)                             # all-to-all 1: heads out, positions in
    sizes = [b * hq * sl * d, b * hk * sl * d, b * hk * sl * d]
    parts = [torch.split(g, sizes) for g in got]          # from each source rank: its q, k, v
    full = [torch.cat([p[i].view(b, -1, sl, d) for p in parts], dim=2) for i in range(3)]
    out = reference(*full, causal=causal)                 # my heads, every position
    back = _a2a([out[:, :, j * sl:(j + 1) * sl].reshape(-1) for j in range(n)], group)
    mine = torch.cat([x.view(b, hq, sl, d) for x in back], dim=1)   # all heads, my positions
    return mine


def ulysses_traffic(seq=64, batch=1, heads=8, kv_heads=4, head_dim=16, causal=True, group=None) -> dict:
    """Bytes this rank's sockets carried in one Ulysses forward (payload + gloo's headers:
    96 B per message sent, 48 B per message received), the formula, and max |diff| of the
    output against one process."""
    from labkit.comm import traffic
    from labkit.cp.formulas import ulysses_wire
    from labkit.cp.parity import qkv
    from labkit.cp.shard import shard_sequence
    q, k, v = qkv(batch, heads, kv_heads, seq, head_dim)
    parts = [shard_sequence(t, 2, group=group) for t in (q, k, v)]
    ulysses_attention(*parts, group=group, causal=causal)            # warm-up: gloo's buffers
    with traffic.measure(sync=True, group=group) as m:
        out = ulysses_attention(*parts, group=group, causal=causal)
    dist.barrier(group=group)
    want = shard_sequence(reference(q, k, v, causal=causal), 2, group=group)
    n = dist.get_world_size(group)
    return {"sent": m.sent, "formula": ulysses_wire(seq, n, batch=batch, heads=heads, kv_heads=kv_heads,
                                                    head_dim=head_dim, itemsize=4),
            "max diff": (out - want).abs().max().item()}


def by_degree(per_rank=16, degrees=(2, 4), heads=8, kv_heads=4, head_dim=16) -> list:
    """Rank 0's forward bytes on groups of the first N ranks, s = per_rank x N positions (the
    sequence grows with the CP degree): Ulysses and the ring, measured and by formula. Every
    rank must call it (it makes the groups); ranks outside a group skip it."""
    from labkit.cp.formulas import wire
    from labkit.cp.parity import attention_traffic
    rows = []
    for n in degrees:
        grp = dist.new_group(list(range(n)))
        if dist.get_rank() < n:
            s = per_rank * n
            u = ulysses_traffic(seq=s, heads=heads, kv_heads=kv_heads, head_dim=head_dim, group=grp)
            ring = attention_traffic(seq=s, method="ring", layout="contiguous", heads=heads,
                                     kv_heads=kv_heads, head_dim=head_dim, group=grp)
            rows.append({"N": n, "seq": s, "ulysses": u["sent"], "ulysses formula": u["formula"]["on the wire"],
                         "ring": ring["forward"],
                         "ring formula": wire(s, n, 0, method="ring", batch=1, kv_heads=kv_heads,
                                              head_dim=head_dim)["forward"]["on the wire"],
                         "max diff": u["max diff"]})
        dist.barrier()
    return rows
