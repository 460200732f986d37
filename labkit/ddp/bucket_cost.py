"""What a bucket costs: the start-up cost of one all-reduce call, measured.

    rows = cluster.run(call_sweep)[0]          # the same 1 MiB all-reduced in 64, 16, 4, 1 calls
    fit = per_call(rows)                       # seconds per call, and the bytes' own time
    startup_share(rows)                        # the tiniest cap's time over one call's

The notes: 桶太小 → 通信次数多，启动开销占比高 (too small, many calls, start-up costs dominate).
`call_sweep` all-reduces one flat gradient cut into buckets of each cap, launched one after the
other without waiting (as DDP's hooks do) and waited for at the end, so the bytes are the same
at every cap and only the number of calls changes; caps interleaved over the repeats, the
fastest kept, the slowest rank's time. A straight line through time against calls gives the
start-up cost of one call (its slope) and the time of the bytes alone (its intercept).

Layer 1 at import: torch is imported inside `call_sweep`, which runs on the ranks.
"""
import math
import time

MB = 1024 * 1024
CAPS_MB = (1 / 64, 1 / 16, 1 / 4, 1)          # 16 KiB .. 1 MiB: 64, 16, 4 and 1 call for 1 MiB


def call_sweep(numel: int = 1 << 18, caps_mb=CAPS_MB, repeats: int = 3, warmup: int = 1) -> list:
    """On every rank: all-reduce `numel` float32 values in buckets of each cap. Returns (every
    rank) [{"cap_mb", "calls", "bytes", "times"}] with the slowest rank's seconds per repeat."""
    import torch
    import torch.distributed as dist
    import labkit
    dev = labkit.device()
    flat = torch.ones(numel, device=dev)
    nbytes = numel * 4
    out = {c: [] for c in caps_mb}
    for rep in range(warmup + repeats):
        for cap in caps_mb:
            per = max(1, int(cap * MB) // 4)
            buckets = list(flat.split(per))
            dist.barrier()
            t0 = time.perf_counter()
            works = [dist.all_reduce(b, async_op=True) for b in buckets]
            for w in works:
                w.wait()
            took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            if rep >= warmup:
                out[cap].append(float(took))
    return [{"cap_mb": c, "calls": math.ceil(nbytes / max(4, int(c * MB) // 4 * 4)), "bytes": nbytes,
             "times": out[c]} for c in caps_mb]


def per_call(rows) -> dict:
    """Least squares of the fastest time against the number of calls: {"call_s": slope (one
    call's start-up cost), "bytes_s": intercept (the same bytes with no start-up cost)}."""
    xs = [r["calls"] for r in rows]
    ys = [min(r["times"]) for r in rows]
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    return {"call_s": slope, "bytes_s": intercept}


def startup_share(rows) -> float:
    """The tiniest cap's time over the largest cap's, both the fastest of their repeats."""
    rs = sorted(rows, key=lambda r: r["calls"])
    return min(rs[-1]["times"]) / min(rs[0]["times"])


def startup_verdict(rows, factor: float = 3.0) -> bool:
    """ok when the tiniest cap's calls take at least `factor` x the one call's time for the same
    bytes, and the fitted start-up cost per call is positive; the line gives both as ratios."""
    from labkit.i18n import tr
    from labkit.verdict import verdict
    rs = sorted(rows, key=lambda r: r["calls"])
    one = min(rs[0]["times"])
    share, fit = startup_share(rows), per_call(rows)
    return verdict(share >= factor and fit["call_s"] > 0, tr(
        "the same {mib:g} MiB in {many} calls took {share:.0f}x as long as in {few} (bar: {factor:g}x); "
        "one call's start-up cost is {per:.2f}x the time of the whole {mib:g} MiB in one call",
        mib=rs[0]["bytes"] / MB, many=rs[-1]["calls"], few=rs[0]["calls"], share=share, factor=factor,
        per=fit["call_s"] / one))
