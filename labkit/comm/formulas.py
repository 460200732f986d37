"""Traffic and bandwidth formulas (layer 1: pure maths, no processes).

Ring all-reduce (Patarasuk & Yuan 2009; the notes: 每卡发送 2×(N-1)/N × 梯度大小): a
reduce-scatter of N-1 steps, then an all-gather of N-1 steps, each step moving one chunk of
S/N bytes to the right-hand neighbour, so every rank sends and receives 2(N-1)/N x S.
The naive all-reduce (reduce to a root, then broadcast) makes the root receive (N-1) x S
and send (N-1) x S, while every other rank sends S and receives S.

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md): algbw = S / t and
busbw = algbw x factor, the factor being what one rank's link must carry relative to S.
"""
from collections import namedtuple

BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def chunk_bounds(length: int, parts: int) -> list:
    """[(start, stop)] of `parts` contiguous chunks of a length-`length` vector, sizes differing
    by at most one (the first length % parts chunks get the extra element); some are empty
    when length < parts."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(length, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


RingStep = namedtuple("RingStep", "phase step send recv")


def ring_schedule(rank: int, n: int, owner_shift: int = 0) -> list:
    """The ring all-reduce's schedule for `rank` of `n`: 2(N-1) RingStep(phase, step, send,
    recv), the chunks (indices into chunk_bounds) it sends to rank+1 and receives from rank-1.

        reduce-scatter step s: send chunk (r-s-1) % N, receive chunk (r-s-2) % N and add it
        all-gather     step s: send chunk (r-s)   % N, receive chunk (r-s-1) % N and copy it

    After the reduce-scatter rank r holds the whole sum of chunk r, as torch's
    `reduce_scatter_tensor` leaves it. This is the one place the schedule is written: labkit's
    rings, the traffic formula and the exercise checker all read it. `owner_shift` rotates it
    (rank r then ends the reduce-scatter owning chunk (r + shift) % N); the checker uses that
    only to follow a learner who rotated the chunks, which is just as correct."""
    out = []
    for s in range(n - 1):
        out.append(RingStep("reduce-scatter", s, (rank + owner_shift - s - 1) % n,
                            (rank + owner_shift - s - 2) % n))
    for s in range(n - 1):
        out.append(RingStep("all-gather", s, (rank + owner_shift - s) % n,
                            (rank + owner_shift - s - 1) % n))
    return out


def ring_bytes_per_rank(size_bytes: float, n: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of `size_bytes`: 2(N-1)/N x S."""
    return 2 * (n - 1) / n * size_bytes


def ring_bytes_exact(length: int, n: int, itemsize: int, rank: int) -> int:
    """Exact payload bytes `rank` sends in labkit's ring (ring_schedule), chunks uneven
    (chunk_bounds)."""
    sizes = [b - a for a, b in chunk_bounds(length, n)]
    return sum(sizes[st.send] for st in ring_schedule(rank, n)) * itemsize


def naive_bytes(size_bytes: float, n: int, rank: int, root: int = 0) -> tuple:
    """(sent, received) by `rank` in reduce-to-root then broadcast: the root (N-1)S each way."""
    if n == 1:
        return 0, 0
    return ((n - 1) * size_bytes, (n - 1) * size_bytes) if rank == root else (size_bytes, size_bytes)


def busbw(op: str, size_bytes: float, seconds: float, n: int) -> tuple:
    """(algbw, busbw) in bytes/s for `op` (a key of BUSBW_FACTOR, or "ring"/"naive" all-reduce)."""
    key = "all_reduce" if op in ("ring", "naive", "ring_all_reduce", "naive_all_reduce") else op
    algbw = size_bytes / seconds
    return algbw, algbw * BUSBW_FACTOR[key](n)


def step_traffic(model_params: float, bytes_per_grad: int = 2, n: int = None) -> float:
    """Bytes each rank sends per DDP step for the gradients: 2(N-1)/N x params x bytes,
    tending to 2 x the gradient size for large N (n=None): 70e9 x 2 B -> 280 GB."""
    grad = model_params * bytes_per_grad
    return 2 * grad if n is None else ring_bytes_per_rank(grad, n)
