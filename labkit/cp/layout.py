"""Which positions of the sequence each rank holds under context parallelism, and the causal
work that follows. Pure: no torch, no processes.

Two layouts of a length-S sequence over N ranks:

- ``contiguous``: N chunks, rank r holds chunk r (sizes differ by at most one, the first S % N
  chunks get the extra position, as `labkit.comm.formulas.chunk_bounds`).
- ``zigzag``: 2N chunks, rank r holds chunk r and chunk 2N-1-r (ring-flash-attention's
  "zigzag", Llama 3's load-balanced split): every rank gets one early and one late chunk.

Under a causal mask, query position p attends to the p + 1 keys 0..p, so the work of a rank is
the sum of (p + 1) over the positions it holds. Contiguous blocks give the last rank about
2N - 1 times the work of the first; zigzag gives every rank the same work up to rounding.
"""
from labkit.comm.formulas import chunk_bounds
from labkit.i18n import tr

LAYOUTS = ("contiguous", "zigzag")


def _check(seq_len: int, n: int, layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(tr("layout={layout!r} is not one of {layouts}", layout=layout, layouts=LAYOUTS))
    if n < 1:
        raise ValueError(tr("the context-parallel degree must be >= 1, got {n}", n=n))
    parts = n if layout == "contiguous" else 2 * n
    if seq_len < parts:
        raise ValueError(tr("a sequence of {seq} positions cannot be split into the {parts} chunks the "
                            "{layout} layout needs on {n} ranks ({per} per rank); use a sequence of at least "
                            "{parts} positions or fewer ranks", seq=seq_len, parts=parts, layout=layout, n=n,
                            per="1" if layout == "contiguous" else "2"))


def chunk_ids(rank: int, n: int, layout: str = "contiguous") -> tuple:
    """The indices of the chunks rank `rank` holds: (rank,) or (rank, 2n-1-rank)."""
    if not 0 <= rank < n:
        raise ValueError(tr("rank {rank} is not in 0..{last}", rank=rank, last=n - 1))
    if layout == "contiguous":
        return (rank,)
    if layout == "zigzag":
        return (rank, 2 * n - 1 - rank)
    raise ValueError(tr("layout={layout!r} is not one of {layouts}", layout=layout, layouts=LAYOUTS))


def ranges(seq_len: int, n: int, rank: int, layout: str = "contiguous") -> list:
    """[(start, stop)] of global positions rank `rank` holds, in the order it stores them."""
    _check(seq_len, n, layout)
    bounds = chunk_bounds(seq_len, n if layout == "contiguous" else 2 * n)
    return [bounds[c] for c in chunk_ids(rank, n, layout)]


def local_len(seq_len: int, n: int, rank: int, layout: str = "contiguous") -> int:
    return sum(b - a for a, b in ranges(seq_len, n, rank, layout))


def positions(seq_len: int, n: int, rank: int, layout: str = "contiguous") -> list:
    """Every global position rank `rank` holds, in its local order."""
    return [p for a, b in ranges(seq_len, n, rank, layout) for p in range(a, b)]


def permutation(seq_len: int, n: int, layout: str = "contiguous") -> list:
    """The global positions in the order the ranks' parts concatenate (rank 0's first)."""
    return [p for r in range(n) for p in positions(seq_len, n, r, layout)]


def pair_kind(q_range: tuple, k_range: tuple, causal: bool) -> str:
    """How a block of queries (positions q_range) sees a block of keys (k_range):
    "full" (every query sees every key), "diagonal" (some do: mask needed) or "skip" (none)."""
    if not causal:
        return "full"
    (q0, q1), (k0, k1) = q_range, k_range
    if k0 > q1 - 1:            # the first key is after the last query
        return "skip"
    if k1 - 1 <= q0:           # the last key is at or before the first query
        return "full"
    return "diagonal"


def scores_computed(seq_len: int, n: int, rank: int, layout: str = "contiguous",
                    causal: bool = True) -> int:
    """Score entries (query, key) rank `rank` computes over a whole ring pass, block by block:
    a skipped block costs 0, a diagonal or full block its whole area (the mask is applied to
    a computed block). Per batch and head."""
    mine = ranges(seq_len, n, rank, layout)
    total = 0
    for src in range(n):
        for k in ranges(seq_len, n, src, layout):
            for q in mine:
                if pair_kind(q, k, causal) != "skip":
                    total += (q[1] - q[0]) * (k[1] - k[0])
    return total


def causal_work(seq_len: int, n: int, layout: str = "contiguous") -> list:
    """Per rank, the (query, key) pairs a causal mask keeps for the positions it holds."""
    return [sum(p + 1 for p in positions(seq_len, n, r, layout)) for r in range(n)]


def imbalance(work: list) -> float:
    """The busiest rank's work over the mean: 1.0 is balanced; the step waits for the busiest."""
    return max(work) / (sum(work) / len(work))
