"""python -m labkit.bench collectives [--world-size 4] [--sizes 4K,1M,64M] [--iters N] [--plot busbw.png]

Bandwidth of every collective in the convention of nccl-tests (doc/PERFORMANCE.md):
time per call, algbw = S / time, busbw = algbw x factor, factor 2(N-1)/N for all-reduce
(torch's, labkit's ring and labkit's naive), (N-1)/N for reduce-scatter and all-gather, 1 for
broadcast. S is the whole buffer (the all-gather output, the reduce-scatter input).
The ops are interleaved within each iteration (barrier, op, barrier, next op ...), so a noisy
neighbour slows all of them alike; time is the slowest rank's, median over iterations.
Wrap timing runs in `flock /tmp/labkit-bench.lock` on a shared machine. The same code runs on
NCCL (tensors on labkit.device(), cuda.synchronize around each op): untested here, no GPU.
"""
import argparse
import statistics
import sys

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "ring_all_reduce", "naive_all_reduce"]
FACTOR_OP = {"ring_all_reduce": "all_reduce", "naive_all_reduce": "all_reduce"}
DEFAULT_SIZES = [1 << k for k in range(12, 27, 2)]      # 4 KiB .. 64 MiB, x4


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * mult[text[-1]]) if text[-1] in mult else int(text)


def human(nbytes: float) -> str:
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= k:
            return f"{nbytes / k:g}{unit}"
    return f"{int(nbytes)}"


def _iters_for(size: int, iters: int) -> int:
    return iters if iters else max(5, min(30, (64 << 20) // max(size, 1) // 2))


def _rank_sweep(sizes, ops, iters, warmup):
    """On every rank: {(op, size): [seconds per iteration]} for this rank."""
    import time
    import torch
    import torch.distributed as dist
    import labkit
    from labkit import comm
    n, dev = labkit.world_size(), labkit.device()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    # torch 2.13 renamed the *_tensor forms to *_single; older releases only have the former
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    out = {}
    for size in sizes:
        count = max(n, size // 4 // n * n)                   # float32 elements, divisible by N
        full = torch.ones(count, device=dev)
        part = torch.ones(count // n, device=dev)
        run = {"all_reduce": lambda: dist.all_reduce(full),
               "reduce_scatter": lambda: reduce_scatter(part, full),
               "all_gather": lambda: all_gather(full, part),
               "broadcast": lambda: dist.broadcast(full, 0),
               "ring_all_reduce": lambda: comm.ring_all_reduce(full),
               "naive_all_reduce": lambda: comm.naive_all_reduce(full)}
        k = _iters_for(size, iters)
        for it in range(warmup + k):
            for op in ops:
                full.fill_(1.0)                              # keep values finite across repeats
                sync()
                dist.barrier()
                t0 = time.perf_counter()
                run[op]()
                sync()
                if it >= warmup:
                    out.setdefault((op, count * 4), []).append(time.perf_counter() - t0)
    return out


def sweep(cluster, sizes=DEFAULT_SIZES, ops=OPS, iters=0, warmup=2, timeout=600) -> list:
    """Run the sweep on `cluster`; rows of dicts: op, bytes, seconds, algbw, busbw (bytes/s)."""
    from labkit.comm.formulas import busbw
    per_rank = cluster.run(_rank_sweep, list(sizes), list(ops), iters, warmup, timeout=timeout)
    n, rows = cluster.world_size, []
    for (op, size), _ in per_rank[0].items():
        slowest = [max(ts) for ts in zip(*(r[(op, size)] for r in per_rank))]
        t = statistics.median(slowest)
        alg, bus = busbw(FACTOR_OP.get(op, op), size, t, n)
        rows.append({"op": op, "bytes": size, "seconds": t, "algbw": alg, "busbw": bus, "world_size": n,
                     "best_seconds": min(slowest), "samples": slowest})
    return rows


def ratio(rows, size=None, num="ring_all_reduce", den="all_reduce", paired=False) -> float:
    """busbw of `num` over busbw of `den` at `size` (default: the largest size): the ratio of
    median times, or with paired=True the median over iterations of each iteration's ratio
    (the two ops ran back to back, so a busy moment of the machine slows both alike)."""
    size = size or max(r["bytes"] for r in rows)
    get = {(r["op"], r["bytes"]): r for r in rows}
    a, b = get[(den, size)], get[(num, size)]
    if paired:
        return statistics.median(x / y for x, y in zip(a["samples"], b["samples"]))
    return a["seconds"] / b["seconds"]


def table(rows) -> str:
    """nccl-tests style: one line per size and op; GB/s are 1e9 bytes/s as in nccl-tests."""
    n = rows[0]["world_size"] if rows else 0
    lines = [f"# world size {n}; busbw factor: all_reduce 2(N-1)/N = {2 * (n - 1) / max(n, 1):.3g}, "
             f"reduce_scatter/all_gather (N-1)/N = {(n - 1) / max(n, 1):.3g}, broadcast 1",
             f"{'size':>8} {'op':>17} {'time(us)':>11} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12}"]
    for r in sorted(rows, key=lambda r: (r["bytes"], OPS.index(r["op"]))):
        lines.append(f"{human(r['bytes']):>8} {r['op']:>17} {r['seconds'] * 1e6:11.1f} "
                     f"{r['algbw'] / 1e9:12.3f} {r['busbw'] / 1e9:12.3f}")
    sizes = sorted({r["bytes"] for r in rows})
    have = {r["op"] for r in rows}
    if {"ring_all_reduce", "all_reduce"} <= have:
        lines.append("# labkit ring / gloo all_reduce busbw, ratio of median times: " +
                     ", ".join(f"{human(s)} {ratio(rows, s):.2f}" for s in sizes))
        lines.append("# labkit ring / gloo all_reduce busbw, median of paired ratios: " +
                     ", ".join(f"{human(s)} {ratio(rows, s, paired=True):.2f}" for s in sizes))
    return "\n".join(lines)


def plot(rows, path=None, ax=None):
    """busbw against message size, one line per op (log-log); saved to `path` if given."""
    import matplotlib.pyplot as plt
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.2))
    for op in [o for o in OPS if any(r["op"] == o for r in rows)]:
        pts = sorted((r["bytes"], r["busbw"] / 1e9) for r in rows if r["op"] == op)
        style = "-o" if op.startswith(("ring", "naive")) else "--s"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=op, ms=4)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({r["bytes"] for r in rows})
    ax.set_xticks(sizes, [human(s) for s in sizes])
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"bus bandwidth, {rows[0]['world_size']} ranks (nccl-tests convention)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if fig is not None:
        fig.tight_layout()
        if path:
            fig.savefig(path, dpi=110)
    return ax


def main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.bench collectives", description=__doc__.split("\n\n")[1])
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--sizes", default=",".join(human(s) for s in DEFAULT_SIZES),
                   help="comma-separated sizes in bytes, K/M/G suffixes (default 4K..64M by x4)")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--iters", type=int, default=0, help="timed iterations per size (0: by size)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backend", default="auto")
    p.add_argument("--plot", default="", help="save busbw against size to this PNG")
    a = p.parse_args(argv)
    import labkit
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    ops = [o for o in a.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad:
        print(f"unknown op(s) {bad}; choose from {OPS}", file=sys.stderr)
        return 2
    with labkit.Cluster(a.world_size, backend=a.backend, spares=0) as cluster:
        rows = sweep(cluster, sizes, ops, a.iters, a.warmup)
        print(f"# backend {cluster.backend}, {cluster.threads_per_rank} torch thread(s) per rank")
    print(table(rows))
    if a.plot:
        plot(rows, a.plot)
        print(f"# plot: {a.plot}")
    return 0
