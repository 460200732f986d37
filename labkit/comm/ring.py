"""Collectives on point-to-point send/recv only: the naive all-reduce and the simple ring.

The simple versions, one exchange per step, written to be read (picotron keeps the naive
next to the fast one; the fast ring is `labkit.comm.ring_fast`). Every function works in
place on the flattened tensor, for any world size >= 1 and any length, sums (op=SUM).

Each rank sends to its right-hand neighbour (rank+1) and receives from its left (rank-1),
mod N, the chunks (`chunk_bounds`) that `formulas.ring_schedule` names for each step. After
the N-1 reduce-scatter steps rank r holds the full sum of chunk r, as
`dist.reduce_scatter_tensor` gives it.
"""
import torch
import torch.distributed as dist

from labkit.comm import link, recorder as record, traffic
from labkit.comm.formulas import chunk_bounds, ring_schedule


def ring_setup(tensor: torch.Tensor, group=None):
    """(flat working tensor, rank, world size, global rank of left, of right)."""
    if not isinstance(tensor, torch.Tensor):
        from labkit.i18n import tr
        raise TypeError(tr("expected a torch.Tensor, got {kind}", kind=type(tensor).__name__))
    r, n = dist.get_rank(group), dist.get_world_size(group)
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    glob = (lambda g: g) if group is None else (lambda g: dist.get_global_rank(group, g))
    return flat, r, n, glob((r - 1) % n), glob((r + 1) % n)


def finish(tensor: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """Copy the result back when the input was not contiguous (we worked on a copy)."""
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def exchange(send: torch.Tensor, dst: int, recv: torch.Tensor, src: int, group=None) -> None:
    """Send `send` to dst while receiving into `recv` from src (both posted before waiting,
    so a ring of blocking sends cannot deadlock). Empty tensors are not sent at all."""
    reqs = []
    if recv.numel():
        reqs.append(dist.irecv(recv, src, group=group))
    if send.numel():
        link.charge(send.numel() * send.element_size())         # a slow link, if one is set
        reqs.append(dist.isend(send, dst, group=group))
    for q in reqs:
        q.wait()
    traffic.count(send.numel() * send.element_size(), recv.numel() * recv.element_size(),
                  int(send.numel() > 0), int(recv.numel() > 0))


def _step(phase, step, r, right, send_c, left, recv_c, send, recv, fn, group):
    t0 = record.now() if record.recording() else 0.0
    exchange(send, right, recv, left, group)
    fn()
    if record.recording():
        record.note(phase=phase, step=step, rank=r, send_to=right, send_chunk=send_c,
                    recv_from=left, recv_chunk=recv_c, sent=send.numel() * send.element_size(),
                    received=recv.numel() * recv.element_size(), t0=t0, t1=record.now())


def _reduce_scatter(flat, r, n, left, right, group):
    bounds = chunk_bounds(flat.numel(), n)
    chunk = [flat[a:b] for a, b in bounds]
    buf = torch.empty(max(b - a for a, b in bounds), dtype=flat.dtype, device=flat.device)
    for st in ring_schedule(r, n)[:n - 1]:
        incoming = buf[:chunk[st.recv].numel()]
        _step(st.phase, st.step, r, right, st.send, left, st.recv, chunk[st.send], incoming,
              lambda: chunk[st.recv].add_(incoming), group)
    return chunk[r]


def _all_gather(flat, r, n, left, right, group):
    chunk = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    for st in ring_schedule(r, n)[n - 1:]:
        _step(st.phase, st.step, r, right, st.send, left, st.recv, chunk[st.send], chunk[st.recv],
              lambda: None, group)


def ring_reduce_scatter(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum `tensor` over ranks chunk-wise; return this rank's chunk (chunk_bounds(len, N)[rank])
    of the sum, a view into `tensor` (the other chunks are left holding partial sums)."""
    flat, r, n, left, right = ring_setup(tensor, group)
    out = _reduce_scatter(flat, r, n, left, right, group)
    finish(tensor, flat)
    return out


def ring_all_gather(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Fill every chunk of `tensor` with the owner's copy: rank r contributes chunk r
    (chunk_bounds(len, N)[r]); in place, returns `tensor`."""
    flat, r, n, left, right = ring_setup(tensor, group)
    _all_gather(flat, r, n, left, right, group)
    return finish(tensor, flat)


def ring_all_reduce_simple(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Ring all-reduce (sum, in place): reduce-scatter then all-gather, one chunk per step.
    Each rank sends and receives 2(N-1)/N x S bytes (formulas.ring_bytes_exact)."""
    flat, r, n, left, right = ring_setup(tensor, group)
    _reduce_scatter(flat, r, n, left, right, group)
    _all_gather(flat, r, n, left, right, group)
    return finish(tensor, flat)


def naive_all_reduce(tensor: torch.Tensor, group=None, root: int = 0) -> torch.Tensor:
    """All-reduce the way one would write it first: every rank sends its tensor to `root`
    (group rank), which adds them and sends the sum back to each. In place, returns `tensor`.

    The root receives (N-1) x S and sends (N-1) x S while the others move S each way: the
    root's link is the bottleneck and the time grows with N (formulas.naive_bytes)."""
    flat, r, n, _, _ = ring_setup(tensor, group)
    glob = (lambda g: g) if group is None else (lambda g: dist.get_global_rank(group, g))
    size = flat.numel() * flat.element_size()
    if n == 1 or flat.numel() == 0:
        return finish(tensor, flat)
    if r == root:
        incoming = torch.empty_like(flat)
        for s, peer in enumerate(p for p in range(n) if p != root):      # reduce
            t0 = record.now()
            dist.recv(incoming, glob(peer), group=group)
            flat.add_(incoming)
            traffic.count(received=size, messages_received=1)
            record.note(phase="reduce", step=s, rank=r, send_to=None, send_chunk=None,
                        recv_from=glob(peer), recv_chunk=0, sent=0, received=size, t0=t0, t1=record.now())
        reqs = []
        for p in range(n):                                                   # broadcast
            if p != root:
                link.charge(size)                                            # a slow link, if set
                reqs.append(dist.isend(flat, glob(p), group=group))
        for q in reqs:
            q.wait()
        traffic.count(sent=size * (n - 1), messages_sent=n - 1)
    else:
        t0 = record.now()
        link.charge(size)
        dist.send(flat, glob(root), group=group)
        dist.recv(flat, glob(root), group=group)
        traffic.count(size, size, 1, 1)
        record.note(phase="reduce", step=0, rank=r, send_to=glob(root), send_chunk=0,
                    recv_from=glob(root), recv_chunk=0, sent=size, received=size, t0=t0, t1=record.now())
    return finish(tensor, flat)
