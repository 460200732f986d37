"""Bytes on the wire, per rank: measured by the kernel, and counted by labkit's collectives.

    with labkit.comm.traffic.measure() as m:     # inside a rank
        dist.all_reduce(t)                       # torch's own collective: counted too
    m.sent, m.received                           # bytes this rank's process group moved

`measure()` reads the kernel's TCP counters (``getsockopt(TCP_INFO)``) of this process's
process-group sockets, found through /proc/self/fd, before and after the block (on the rank
itself, so inside a local cluster's own network namespace: runtime/local/netns.py). It sees
every byte gloo writes, whoever called it (labkit's ring or `torch.distributed`), because it
is measured outside both. ``sent`` is what the application handed to TCP
(tcpi_bytes_sent - tcpi_bytes_retrans + tcpi_notsent_bytes, Linux >= 4.19; older kernels
fall back to tcpi_bytes_acked, which can lag the last few KB); ``received`` is
tcpi_bytes_received (every byte that arrived in order, read by gloo or not yet).

What is not counted: the rendezvous store's socket (a TCPStore at the store's host and port,
under torchrun; a local cluster's store is a file) and labkit's control connection to the
notebook. /proc/self/io is no substitute: its
wchar/rchar also count pipes and files, and miss sendmsg/recvmsg traffic.

gloo frames each message with a header and the receiver announces each receive it posts,
so ``sent`` = payload + 96 B x messages sent + 48 B x messages received (gloo in torch 2.13;
`overhead_per_message` measures both numbers, tests/comm/test_comm.py checks the sum). On the
receiving side the same bytes show up, except that a peer's 48-byte notices for this rank's
last sends may arrive just after the block ends: ``received`` can be short by up to
48 B x messages sent. On NCCL the bytes go over NVLink or InfiniBand, not these sockets, and `sent`
stays near 0: use the payload counters there (untested: no GPU on the course machines).

labkit's own collectives also add their payload (tensor bytes, no headers) and message
count to ``m.payload_sent``, ``m.payload_received``, ``m.messages_sent``, through `count`.

Linux only: TCP_INFO and /proc/self/fd. On macOS (and with LABKIT_PORTABLE=1) `measure()`
raises `TrafficUnavailable`, whose words say so; nothing is estimated in its place. A Mac's
kernel keeps per-connection byte counters too (getsockopt TCP_CONNECTION_INFO: tcpi_txbytes,
tcpi_rxbytes), which labkit does not read yet: no Mac to test it on.
"""
import os
import socket
import struct
import time
from contextlib import contextmanager
from dataclasses import dataclass

# struct tcp_info offsets (linux/tcp.h), in bytes
_NOTSENT = 144          # __u32 tcpi_notsent_bytes
_BYTES_ACKED = 120      # __u64 tcpi_bytes_acked
_BYTES_RECEIVED = 128   # __u64 tcpi_bytes_received
_BYTES_SENT = 200       # __u64 tcpi_bytes_sent (Linux 4.19+)
_BYTES_RETRANS = 208    # __u64 tcpi_bytes_retrans
_TCP_INFO_LEN = 232

class TrafficUnavailable(RuntimeError):
    """Bytes on the wire cannot be measured on this system."""


def unavailable_reason() -> str:
    """Why `measure()` cannot count bytes here ('' where it can)."""
    from labkit.runtime import portable
    if portable.TCP_COUNTERS:
        return ""
    return ("bytes on the wire are not measured on this system: labkit reads Linux's per-socket "
            "TCP counters (TCP_INFO, the sockets found through /proc/self/fd), and "
            + portable.why_not("that") + ". The formulas in this course hold all the same; to "
            "see them measured, run this notebook on Linux (a Linux machine or container).")


_payload = [0, 0, 0, 0]   # bytes sent, bytes received, messages sent, messages received


def count(sent: int = 0, received: int = 0, messages_sent: int = 0, messages_received: int = 0) -> None:
    """Called by labkit's collectives for each message: payload bytes, without headers."""
    _payload[0] += sent
    _payload[1] += received
    _payload[2] += messages_sent
    _payload[3] += messages_received


def _excluded_peers() -> set:
    """(host, port) of the rendezvous store: its socket is not process-group traffic."""
    try:
        import torch.distributed as dist
        if not dist.is_initialized():
            return set()
        store = dist.distributed_c10d._get_default_store()
        while hasattr(store, "underlying_store"):
            store = store.underlying_store
        host = socket.gethostbyname(store.host)
        return {(host, store.port)}
    except Exception:                  # no store we can see: count everything
        return set()


def _control_fd() -> int:
    from labkit.runtime import context
    return context.control_fd()


def _tcp_counters() -> dict:
    """{socket inode: (sent, received)} for this process's connected TCP sockets."""
    why = unavailable_reason()
    if why:
        raise TrafficUnavailable(why)
    skip_peers, skip_fd, out = _excluded_peers(), _control_fd(), {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == skip_fd:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("socket:"):
            continue
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                peer = s.getpeername()
            except OSError:
                continue                       # listening or unconnected
            host = peer[0][7:] if peer[0].startswith("::ffff:") else peer[0]   # IPv4-mapped IPv6
            if (host, peer[1]) in skip_peers:
                continue
            raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
        finally:
            s.close()
        received = struct.unpack_from("Q", raw, _BYTES_RECEIVED)[0]
        if len(raw) >= _BYTES_RETRANS + 8:
            sent = (struct.unpack_from("Q", raw, _BYTES_SENT)[0]
                    - struct.unpack_from("Q", raw, _BYTES_RETRANS)[0]
                    + struct.unpack_from("I", raw, _NOTSENT)[0])
        else:
            sent = struct.unpack_from("Q", raw, _BYTES_ACKED)[0]
        out[target] = (sent, received)
    return out


@dataclass
class Traffic:
    """What one rank moved inside a `measure()` block (bytes, and seconds)."""
    sent: int = 0                 # measured by the kernel on the process-group sockets
    received: int = 0
    payload_sent: int = 0         # counted by labkit's collectives: tensor bytes only
    payload_received: int = 0
    messages_sent: int = 0        # labkit's point-to-point messages
    messages_received: int = 0
    seconds: float = 0.0


def snapshot() -> tuple:
    """(socket counters, payload counters, time): `measure` subtracts two of these."""
    return _tcp_counters(), tuple(_payload), time.perf_counter()


def difference(before: tuple, after: tuple) -> Traffic:
    (s0, p0, t0), (s1, p1, t1) = before, after
    sent = received = 0
    for key, (a, b) in s1.items():     # a socket opened inside the block starts from 0
        a0, b0 = s0.get(key, (0, 0))
        sent, received = sent + a - a0, received + b - b0
    return Traffic(sent, received, p1[0] - p0[0], p1[1] - p0[1], p1[2] - p0[2], p1[3] - p0[3],
                   t1 - t0)


_sync_calls = {}          # group ranks -> how many synchronised measures they have started


def _store_barrier(group=None) -> None:
    """Wait until every rank of `group` got here, talking only through the rendezvous store,
    whose socket the counters leave out, so the barrier itself adds no counted byte."""
    import torch.distributed as dist
    ranks = tuple(dist.get_process_group_ranks(group) if group is not None
                  else range(dist.get_world_size()))
    n = _sync_calls[ranks] = _sync_calls.get(ranks, 0) + 1
    key = f"labkit-traffic/{'-'.join(map(str, ranks))}/{n}"
    store = dist.distributed_c10d._get_default_store()
    if store.add(key, 1) == len(ranks):
        store.set(key + "/all", b"1")
    store.wait([key + "/all"])


@contextmanager
def measure(sync: bool = False, group=None):
    """Measure this rank's traffic inside the block; the Traffic is filled in at exit.

    sync=True (every rank of `group` must call it then): after its snapshot each rank waits
    for the others at a barrier through the rendezvous store, so no byte of the block can reach
    a rank before it took its snapshot (a fast peer otherwise sends before a slow rank looks)."""
    m = Traffic()
    before = snapshot()
    if sync:
        _store_barrier(group)
    try:
        yield m
    finally:
        d = difference(before, snapshot())
        for field in d.__dataclass_fields__:
            setattr(m, field, getattr(d, field))


def overhead_per_message(sizes=(1 << 10, 1 << 16, 1 << 20), repeats: int = 4) -> dict:
    """Bytes gloo puts on the wire beyond the payload, measured (call on every rank).

    Rank 0 sends `repeats` messages of each size to rank 1. Returns, on ranks 0 and 1,
    {"per_send": extra bytes rank 0 sent per message (the message header),
     "per_recv": bytes rank 1 sent per message it received (its "ready to receive" notice)};
    other ranks return {}. With gloo in torch 2.13 these are 96 and 48 bytes, so a rank's
    wire bytes are payload + 96 x messages sent + 48 x messages received."""
    import torch
    import torch.distributed as dist
    import labkit
    r, dev = dist.get_rank(), labkit.device()
    if dist.get_world_size() < 2:
        return {}
    payload = messages = 0
    dist.barrier()
    with measure() as m:
        for n in sizes if r < 2 else ():
            t = torch.zeros(n // 4, dtype=torch.float32, device=dev)
            for _ in range(repeats):
                if r == 0:
                    dist.send(t, 1)
                else:
                    dist.recv(t, 0)
                payload += t.numel() * 4
                messages += 1
    extra = torch.zeros(2, dtype=torch.float64, device=dev)   # [per_send, per_recv], filled by ranks 0 and 1
    if r < 2:
        extra[r] = (m.sent - (payload if r == 0 else 0)) / messages
    dist.barrier()
    dist.all_reduce(extra)
    return {"per_send": extra[0].item(), "per_recv": extra[1].item()} if r < 2 else {}
