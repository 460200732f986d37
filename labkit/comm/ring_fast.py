"""The ring all-reduce made fast: pipelined pieces and reused buffers.

Same schedule and same bytes as `labkit.comm.ring.ring_all_reduce_simple` (reduce-scatter
then all-gather, 2(N-1) steps), with two changes that matter on a real link:

1. Pipelining. Each chunk is cut into P pieces (4, or fewer so that none is under 4 MiB;
   `piece_bytes` overrides). The piece a rank
   sends at step k+1 is the piece it received (and added) at step k, so it is forwarded as
   soon as that piece is done instead of when the whole chunk is: the link is busy while
   the CPU adds, and the ring behaves like a pipeline of pieces (NCCL does the same with its
   "slices"; Patarasuk & Yuan 2009, section 3).
2. Reused buffers. Receive buffers (`window` pieces) are kept between calls. Fresh ones
   per call are fresh pages: the first write to each page faults. A first prototype with
   chunk-sized fresh buffers lost a quarter of its bandwidth that way; with 4 x 4 MiB pieces
   fresh buffers cost about 5 % at 64 MB on 4 ranks here (measured once, interleaved).

Messages between two ranks match in the order they are posted (same tag), and both sides
post them in (step, piece) order, so the pieces cannot be confused.
"""
import math

import torch
import torch.distributed as dist

from labkit.comm import link, recorder as record, traffic
from labkit.comm.formulas import chunk_bounds, ring_schedule
from labkit.comm.ring import finish, ring_setup

PIECES = 4                  # pieces per chunk: enough to overlap adding with the link; more pieces
                            # cost more wake-ups than they save on 2 shared cores (64 MB: 16 pieces -10 %)
MIN_PIECE_BYTES = 4 << 20   # 4 MiB: on 4 ranks sharing 2 cores a message costs ~0.3 ms of wake-ups, so
                            # smaller pieces lose (4 MB all-reduce in 256 KiB pieces: half the speed).
                            # A real link (NCCL, InfiniBand) wants far smaller pieces: pass piece_bytes.
WINDOW = 4                  # receives posted ahead (= reusable buffers)
_buffers = {}               # (dtype, device) -> flat receive buffer, grown on demand


def _buffer(numel: int, like: torch.Tensor) -> torch.Tensor:
    key = (like.dtype, str(like.device))
    buf = _buffers.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=like.dtype, device=like.device)
        _buffers[key] = buf
    return buf[:numel]


def ring_all_reduce(tensor: torch.Tensor, group=None, piece_bytes: int = None,
                    window: int = WINDOW) -> torch.Tensor:
    """Sum `tensor` over the ranks of `group`, in place, with a pipelined ring; returns it.

    Each rank sends and receives 2(N-1)/N x S bytes (formulas.ring_bytes_exact), in
    2(N-1) steps of P pieces. Works for any N >= 1, any length and dtype."""
    flat, r, n, left, right = ring_setup(tensor, group)
    if n == 1 or flat.numel() == 0:
        return finish(tensor, flat)
    chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    biggest = max(c.numel() for c in chunks)
    chunk_bytes = biggest * flat.element_size()
    if piece_bytes is None:                            # PIECES per chunk, none under MIN_PIECE_BYTES
        piece_bytes = max(MIN_PIECE_BYTES, math.ceil(chunk_bytes / PIECES))
    pieces_per_chunk = max(1, math.ceil(chunk_bytes / piece_bytes))
    pieces = [[c[a:b] for a, b in chunk_bounds(c.numel(), pieces_per_chunk)] for c in chunks]
    schedule = ring_schedule(r, n)                     # step k < n-1: reduce-scatter, then all-gather
    steps = len(schedule)
    send_c, recv_c = [st.send for st in schedule], [st.recv for st in schedule]
    order = [(k, j) for k in range(steps) for j in range(pieces_per_chunk)]
    piece_numel = max(p.numel() for p in pieces[0])
    bufs = _buffer(window * piece_numel, flat).view(window, piece_numel)
    recording = record.recording()
    t_start = record.now() if recording else 0.0
    times = [[None, None] for _ in range(steps)]       # first and last piece arrival per step
    sends, recvs = [], {}
    sent = received = msgs_s = msgs_r = 0

    def isend(k, j):
        nonlocal sent, msgs_s
        p = pieces[send_c[k]][j]
        if p.numel():
            link.charge(p.numel() * p.element_size())           # a slow link, if one is set
            sends.append(dist.isend(p, right, group=group))
            sent, msgs_s = sent + p.numel() * p.element_size(), msgs_s + 1

    def irecv(i):
        nonlocal received, msgs_r
        k, j = order[i]
        dst = pieces[recv_c[k]][j]
        if k < n - 1:                                  # reduce-scatter: into a buffer, add later
            dst = bufs[i % window][:dst.numel()]
        if dst.numel():
            recvs[i] = (dist.irecv(dst, left, group=group), dst)
            received, msgs_r = received + dst.numel() * dst.element_size(), msgs_r + 1

    for i in range(min(window, len(order))):
        irecv(i)
    for j in range(pieces_per_chunk):
        isend(0, j)
    for i, (k, j) in enumerate(order):
        if i in recvs:
            req, got = recvs.pop(i)
            req.wait()
            if k < n - 1:
                pieces[recv_c[k]][j].add_(got)
        if recording:
            t = record.now()
            times[k][0] = times[k][0] or t
            times[k][1] = t
        if k + 1 < steps:
            isend(k + 1, j)                            # forward the piece we just finished
        if i + window < len(order):
            irecv(i + window)                          # its buffer slot is free again
    for q in sends:
        q.wait()
    traffic.count(sent, received, msgs_s, msgs_r)
    if recording:
        for k, st in enumerate(schedule):
            record.note(phase=st.phase, step=st.step,
                        rank=r, send_to=right, send_chunk=send_c[k], recv_from=left,
                        recv_chunk=recv_c[k], sent=chunks[send_c[k]].numel() * flat.element_size(),
                        received=chunks[recv_c[k]].numel() * flat.element_size(),
                        t0=times[k - 1][1] if k else t_start, t1=times[k][1])
    return finish(tensor, flat)
