"""Bandwidth of collectives in the convention of nccl-tests (doc/PERFORMANCE.md), measured.

    rows = sweep(cluster, sizes=[1 << 12, 1 << 20], ops=["all_reduce", "ring_all_reduce"])
    table(rows); plot(rows); observations(rows); plateaus(rows)

Time per call, algbw = S / time, busbw = algbw x factor: 2(N-1)/N for all-reduce (torch's,
labkit's ring and labkit's naive), (N-1)/N for reduce-scatter and all-gather, 1 for
broadcast. S is the whole buffer (the all-gather output, the reduce-scatter input). The ops
are interleaved within each iteration (barrier, op, barrier, next op ...), so a busy moment of
the machine slows all of them alike; time is the slowest rank's, median over iterations.
On NCCL the tensors live on labkit.device() and cuda.synchronize brackets each op (untested
here: no GPU). The command line is `python -m labkit.bench collectives`.
"""
import statistics
from labkit.figtext import figsize as _figsize, size as _fs
from labkit.i18n import N_, tr, tr_fig, tr_join

OPS = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "ring_all_reduce", "naive_all_reduce"]
FACTOR_OP = {"ring_all_reduce": "all_reduce", "naive_all_reduce": "all_reduce"}
DEFAULT_SIZES = [1 << k for k in range(12, 27, 2)]      # 4 KiB .. 64 MiB, x4
# what each op is, for legends and tables: the library's collectives against labkit's
LABELS = {"all_reduce": N_("torch all_reduce ({backend}'s own)"),
          "reduce_scatter": N_("torch reduce_scatter"), "all_gather": N_("torch all_gather"),
          "broadcast": N_("torch broadcast"),
          "ring_all_reduce": N_("labkit ring_all_reduce (send/recv)"),
          "naive_all_reduce": N_("labkit naive_all_reduce (via rank 0)")}


def human(nbytes: float) -> str:
    """4096 -> '4K', 1 << 20 -> '1M' (binary units, as nccl-tests' size column)."""
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
    from labkit.comm.compat import all_gather_into_tensor as all_gather
    from labkit.comm.compat import reduce_scatter_tensor as reduce_scatter
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
    """Run the sweep on `cluster`; rows of dicts: op, bytes, seconds, algbw, busbw (bytes/s).

    iters=0 picks the count by size (more for small messages)."""
    from labkit.comm.formulas import busbw
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise ValueError(f"unknown op(s) {bad}; choose from {OPS}")
    per_rank = cluster.run(_rank_sweep, list(sizes), list(ops), iters, warmup, timeout=timeout)
    n, rows = cluster.world_size, []
    for (op, size), _ in per_rank[0].items():
        slowest = [max(ts) for ts in zip(*(r[(op, size)] for r in per_rank))]
        t = statistics.median(slowest)
        alg, bus = busbw(FACTOR_OP.get(op, op), size, t, n)
        rows.append({"op": op, "bytes": size, "seconds": t, "algbw": alg, "busbw": bus, "world_size": n,
                     "best_seconds": min(slowest), "samples": slowest, "backend": cluster.backend})
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


def table(rows):
    """nccl-tests style: one row per size and op; GB/s are 1e9 bytes/s as in nccl-tests.
    A `labkit.tables.Table`: aligned text when printed, a table in a notebook."""
    from labkit.tables import Table
    n = rows[0]["world_size"] if rows else 0
    out = [[human(r["bytes"]), r["op"], f"{r['seconds'] * 1e6:,.1f}", f"{r['algbw'] / 1e9:.3f}",
            f"{r['busbw'] / 1e9:.3f}"]
           for r in sorted(rows, key=lambda r: (r["bytes"], OPS.index(r["op"])))]
    notes = []
    sizes = sorted({r["bytes"] for r in rows})
    if {"ring_all_reduce", "all_reduce"} <= {r["op"] for r in rows}:
        notes.append(tr("labkit ring / torch all_reduce busbw (median of paired ratios, > 1: the "
                        "ring is faster): {ratios}", ratios=", ".join(
                            f"{human(s)} {ratio(rows, s, paired=True):.2f}" for s in sizes)))
    return Table(["size", "op", "time (us)", "algbw (GB/s)", "busbw (GB/s)"], out, align="rlrrr",
                 title=tr("world size {n}; busbw factor: all-reduce 2(N-1)/N = {ar:.3g}, "
                          "reduce-scatter and all-gather (N-1)/N = {rs:.3g}, broadcast 1", n=n,
                          ar=2 * (n - 1) / max(n, 1), rs=(n - 1) / max(n, 1)),
                 notes=notes)


def observations(rows, margin: float = 1.1) -> list:
    """Sentences about these rows only: at which sizes labkit's ring is slower than the backend's
    all_reduce, or the naive all-reduce faster than the ring, by more than `margin` x
    (smaller differences are within this machine's noise). Empty if nothing stands out."""
    get = {(r["op"], r["bytes"]): r for r in rows}
    sizes = sorted({r["bytes"] for r in rows})
    said = []
    for slow, fast, words in (("ring_all_reduce", "all_reduce",
                               tr("labkit's ring took longer than torch's all_reduce at {sizes}")),
                              ("ring_all_reduce", "naive_all_reduce",
                               tr("the naive all-reduce beat the ring at {sizes}"))):
        times = {s: get[(slow, s)]["seconds"] / get[(fast, s)]["seconds"]
                 for s in sizes if (slow, s) in get and (fast, s) in get}
        hits = [s for s, x in times.items() if x > margin]
        if hits:
            said.append(words.format(sizes=tr_join(
                tr("{size} (the ring {x:.1f}x the time)", size=human(s), x=times[s]) for s in hits)))
    return said


def plateaus(rows, share: float = 0.8) -> list:
    """For each op, from which size on its busbw stays within `share` of its best in these rows
    (where it levels off), in one sentence each."""
    said = []
    for op in [o for o in OPS if any(r["op"] == o for r in rows)]:
        pts = sorted((r["bytes"], r["busbw"]) for r in rows if r["op"] == op)
        best = max(b for _, b in pts)
        start = next((i for i in range(len(pts)) if all(b >= share * best for _, b in pts[i:])), None)
        if start is None:                       # the largest size fell back below the level
            top = max(pts, key=lambda p: p[1])[0]
            where = tr("at {top}, but not level in this range: at {last} it is {part:.0%} of that",
                       top=human(top), last=human(pts[-1][0]), part=pts[-1][1] / best)
        elif start < len(pts) - 1:
            where = tr("from {size} on", size=human(pts[start][0]))
        else:
            where = tr("only at the largest size, {size}: no level stretch in this range",
                       size=human(pts[-1][0]))
        said.append(tr("{op}: busbw within {share:.0%} of its best ({best:.3g} GB/s) {where}",
                       op=op, share=share, best=best / 1e9, where=where))
    return said


def plot(rows, path=None, ax=None):
    """busbw against message size, one line per op (log-log), legend naming whose op it is;
    saved to `path` if given."""
    import matplotlib.pyplot as plt
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=_figsize((7.5, 4.2)))
    style = {"all_reduce": ("--s", "#34495e"), "ring_all_reduce": ("-o", "#2a9d5c"),
             "naive_all_reduce": ("-^", "#c0392b"), "reduce_scatter": (":v", "#8172B3"),
             "all_gather": (":D", "#DD8452"), "broadcast": (":x", "#7f8c8d")}
    for op in [o for o in OPS if any(r["op"] == o for r in rows)]:
        pts = sorted((r["bytes"], r["busbw"] / 1e9) for r in rows if r["op"] == op)
        fmt, colour = style[op]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], fmt, color=colour, label=tr_fig(LABELS[op]).format(backend=rows[0].get("backend", "the backend")), ms=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({r["bytes"] for r in rows})
    ax.set_xticks(sizes, [human(s) for s in sizes])
    ax.set_xlabel(tr_fig("message size S (bytes)"))
    ax.set_ylabel(tr_fig("busbw (GB/s, log scale)"))
    ax.set_title(tr_fig("bus bandwidth on {n} ranks (nccl-tests convention)", n=rows[0]["world_size"]),
                 fontsize=_fs(10))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=_fs(8), loc="lower right")
    if fig is not None:
        fig.tight_layout()
        if path:
            fig.savefig(path, dpi=110)
    return ax
