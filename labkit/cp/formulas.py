"""Bytes on the wire and memory of context parallelism, per rank. Pure: no torch, no processes.

Notation: S positions split over N ranks (`labkit.cp.layout`), batch b, K/V heads h_kv (fewer
than the query heads a under grouped-query attention), head size d, e bytes per value. The block
of rank j holds L_j positions; its K and V travel as one message of 2 b h_kv L_j d e bytes.

Ring attention (labkit.cp.ring), rank r:
- forward: N - 1 steps; at step t it sends the K/V block it holds (that of rank r - t) to r + 1.
  Sent: sum over t = 0..N-2 of 2 b h_kv L_(r-t) d e, about 2 b h_kv S d e (N - 1) / N.
- backward: the K/V blocks travel the ring again (the same N - 1 messages), and each block's
  dK/dV accumulator travels with it and takes one step more to come home: N messages, one per
  block, so rank r sends 2 b h_kv S d e of gradients. Backward = forward + 2 b h_kv S d e.

All-gather attention (labkit.cp.allgather, Llama 3's choice), rank r:
- forward: all-gather K/V on a ring: the same N - 1 messages as ring attention's forward.
- backward: the gathered K/V are kept, so no second gather; dK/dV, computed for every position,
  are reduce-scattered back to their owners on a ring: N - 1 messages, every block but r's own,
  2 b h_kv (S - L_r) d e bytes.

In 16-bit training the K/V travel in 16 bits, but production rings send the dK/dV accumulators
in fp32 (torch's `accum_dtype = float32`, `convert_to_f32=True`; the (o, lse) merge also
accumulates in fp32): the ring's backward gradient bytes are then 2 b h_kv S d x 4, not x 2
(`wire(..., itemsize=2, grad_itemsize=4)`).

gloo adds headers: a rank's socket carries payload + 96 B per message sent + 48 B per message
received (labkit.comm.traffic). Received messages equal sent messages on a ring.

Memory: full attention materialises the a S x S score matrix; all-gather attention an
a (S/N) x S slab per rank; ring attention one a (S/N) x (S/N) block at a time.
"""
from labkit.cp.layout import local_len

SEND_HEADER, RECV_NOTICE = 96, 48        # gloo, torch 2.13 (labkit.comm.traffic)
METHODS = ("ring", "allgather")


def block_bytes(seq_len: int, n: int, src: int, *, batch: int, kv_heads: int, head_dim: int,
                itemsize: int = 4, layout: str = "contiguous") -> int:
    """Bytes of one K/V message: rank src's K and V together."""
    return 2 * batch * kv_heads * local_len(seq_len, n, src, layout) * head_dim * itemsize


def wire(seq_len: int, n: int, rank: int, *, method: str = "ring", batch: int, kv_heads: int,
         head_dim: int, itemsize: int = 4, layout: str = "contiguous", grad_itemsize=None) -> dict:
    """Payload and messages rank `rank` sends in one attention call, forward and backward, and
    the bytes its sockets carry with gloo's headers: {"forward": {...}, "backward": {...}}.
    grad_itemsize: bytes per value of the dK/dV accumulators when they differ from K/V's: in
    16-bit training production rings send them in fp32 (torch's `accum_dtype = float32`), so
    With itemsize=2, grad_itemsize=4 the ring's backward sends the K/V blocks again at 2 bytes
    and every block's dK/dV at 4: 2 b h_kv s d x 4 of gradients, twice the bf16 figure."""
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}")
    blk = [block_bytes(seq_len, n, j, batch=batch, kv_heads=kv_heads, head_dim=head_dim,
                       itemsize=itemsize, layout=layout) for j in range(n)]
    gblk = [block_bytes(seq_len, n, j, batch=batch, kv_heads=kv_heads, head_dim=head_dim,
                        itemsize=grad_itemsize or itemsize, layout=layout) for j in range(n)]
    kv = [blk[(rank - t) % n] for t in range(n - 1)]               # K/V around the ring
    if method == "ring":
        grads = [gblk[(rank - t) % n] for t in range(n)] if n > 1 else []   # dK/dV, every block
    else:
        grads = [gblk[(rank - t - 1) % n] for t in range(n - 1)]   # reduce-scatter
    out = {}
    for phase, msgs in (("forward", kv), ("backward", kv + grads if method == "ring" else grads)):
        payload = sum(msgs)
        out[phase] = {"payload": payload, "messages": len(msgs),
                      "on the wire": payload + (SEND_HEADER + RECV_NOTICE) * len(msgs)}
    return out


def ulysses_wire(seq_len: int, n: int, *, batch: int, heads: int, kv_heads: int, head_dim: int,
                 itemsize: int = 4) -> dict:
    """Ulysses (labkit.cp.ulysses), one forward, every rank the same (s divisible by N): the
    first all-to-all sends (N-1)/N of its q, k, v blocks, b (h + 2 h_kv) (s/N) d e, the second
    (N-1)/N of its output block, b h (s/N) d e. Payload b (2h + 2h_kv) (s/N) d e (N-1)/N: with
    s/N fixed it stays flat as N grows (the ring's 2 b h_kv s d e (N-1)/N grows with s). Messages:
    N-1 per all-to-all; gloo adds 96 + 48 B per message pair."""
    sl = seq_len // n
    payload = batch * (2 * heads + 2 * kv_heads) * sl * head_dim * itemsize * (n - 1) // n
    messages = 2 * (n - 1)
    return {"payload": payload, "messages": messages,
            "on the wire": payload + (SEND_HEADER + RECV_NOTICE) * messages}


def score_entries(seq_len: int, n: int, *, method: str, heads: int, batch: int = 1,
                  layout: str = "contiguous", causal: bool = False) -> int:
    """The largest attention-score matrix one rank holds at once in this course's unfused
    attention (entries), over all ranks: one `attend` call's query chunk x key chunk.
    - "full": s x s, one process;
    - "allgather": a query chunk against every key it can see: (s/N) x s contiguous, and
      s/(2N) x s under zig-zag (each of a rank's two chunks is computed on its own);
    - "ring": a query chunk against one held K/V chunk: (s/N)^2 contiguous, (s/(2N))^2 zig-zag.
    Fused kernels (flash attention, which Llama 3, Megatron and torch use) never hold these:
    there the difference between the methods is the gathered K/V, `gathered_kv_bytes`."""
    from labkit.cp import layout as L
    if method == "full":
        return batch * heads * seq_len * seq_len
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of ('full', 'allgather', 'ring')")
    chunks = [c for j in range(n) for c in L.ranges(seq_len, n, j, layout)]
    best = 0
    for q in chunks:
        seen = [c for c in chunks if L.pair_kind(q, c, causal) != "skip"]
        size = [c[1] - c[0] for c in seen]
        keys = sum(size) if method == "allgather" else max(size, default=0)
        best = max(best, (q[1] - q[0]) * keys)
    return batch * heads * best


def gathered_kv_bytes(seq_len: int, *, batch: int, kv_heads: int, head_dim: int,
                      itemsize: int = 2) -> int:
    """The K/V an all-gather rank holds per layer, every position: 2 b h_kv s d e. What a fused
    all-gather attention holds beyond a ring (which holds two blocks of s/N)."""
    return 2 * batch * kv_heads * seq_len * head_dim * itemsize


def saved_bytes(seq_len: int, n: int, rank: int, *, method: str, batch: int, heads: int,
                kv_heads: int, head_dim: int, itemsize: int = 4, layout: str = "contiguous") -> int:
    """Bytes one attention call keeps for backward on rank `rank`: its Q block and output
    (b a L_r d each), the log-sum-exp (b a L_r), and K/V: its own block for ring attention
    (2 b h_kv L_r d), every block for all-gather (2 b h_kv S d). No score matrix is kept."""
    lr = local_len(seq_len, n, rank, layout)
    kv = 2 * batch * kv_heads * (lr if method == "ring" else seq_len) * head_dim
    return (2 * batch * heads * lr * head_dim + batch * heads * lr + kv) * itemsize
