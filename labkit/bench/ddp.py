"""python -m labkit.bench ddp [--ranks 4] [--steps 8] [--timeline out.png]

labkit's naive, flat and bucketed DDP against torch's DistributedDataParallel on one model
(TinyGPT, 13.8 M parameters, 55 MB of fp32 gradients) at 4 gloo ranks, in one run: step time
(median of the slowest rank's), torch DDP over bucket_cap_mb 1/5/25/100 with and without
gradient_as_bucket_view, gradient+bucket memory (tensor storages counted exactly), and bytes
sent per rank per step against the ring's 2(N-1)/N x gradient size. Wrap it in
`flock /tmp/labkit-bench.lock` on a shared machine.
"""
import argparse
import os
import statistics
import sys
import time

import labkit
from labkit.comm.formulas import ring_bytes_per_rank
from labkit.ddp import measure, timeline


def combine(per_rank: list) -> dict:
    """bench_ranks' results by rank -> one dict: times are already the slowest rank's (the same
    on every rank); bytes are averaged over ranks."""
    out = per_rank[0]
    for lbl in out:
        for key in ("sent", "received"):
            out[lbl][key] = sum(r[lbl][key] for r in per_rank) / len(per_rank)
    return out


def paired_ratio(a: dict, b: dict) -> float:
    """Median over rounds of a's step time / b's in the same round (they ran back to back, so a
    load change on the machine mostly cancels out)."""
    return statistics.median(x / y for x, y in zip(a["times"], b["times"]))


def _torch_twin(res: dict, r: dict):
    """torch DDP without bucket views at r's bucket cap, in r's group (stepped in turn with r)."""
    for t in res.values():
        if t["group"] == r["group"] and t["config"] == ("torch", r["config"][1], False):
            return t
    return None


def table(res: dict, n: int) -> str:
    grad = next(iter(res.values()))["grad_bytes"]
    ring = ring_bytes_per_rank(grad, n)
    rows = [f"gradient {grad / 1e6:.1f} MB; ring all-reduce formula 2(N-1)/N x gradient = "
            f"{ring / 1e6:.1f} MB per rank per step (N={n})", "",
            f"| {'variant':<28} | step ms | vs torch DDP same cap | sent MB/step | sent/formula | "
            "grad+bucket MB | / gradient |",
            f"| {'-' * 28} | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lbl, r in res.items():
        twin = _torch_twin(res, r) if r["config"][0] != "naive" and r["config"][0] != "flat" else None
        vs = f"{paired_ratio(r, twin):.2f}x" if twin is not None else ""
        mem = r.get("memory")
        rows.append(f"| {lbl:<28} | {r['median'] * 1e3:7.1f} | {vs:>8} | {r['sent'] / 1e6:7.1f} | "
                    f"{r['sent'] / ring:5.3f} | " +
                    (f"{mem / 1e6:7.1f} | {mem / grad:4.2f} |" if mem is not None else " | |"))
    rows.append("(step ms: median of the slowest rank's step; ratios: median over rounds of the ratio "
                "of steps taken back to back)")
    return "\n".join(rows)


def summary(res: dict) -> str:
    """The issue's targets, from paired ratios inside one group."""
    lines = []
    for lbl, r in res.items():
        kind, cap, _ = r["config"]
        twin = _torch_twin(res, r)
        if kind == "bucketed" and twin is not None:
            ratio = paired_ratio(r, twin)
            lines.append(f"bucket_cap_mb={cap}: labkit bucketed / torch DDP step time = {ratio:.2f} "
                         f"({'within' if ratio <= 1.1 else 'OUTSIDE'} the 1.1x target)")
        if kind == "naive":
            for t in res.values():
                if t["group"] == r["group"] and t["config"][0] in ("flat", "bucketed"):
                    lines.append(f"labkit naive / {t['config'][0]}"
                                 f"{' %g MB' % t['config'][1] if t['config'][1] else ''} step time = "
                                 f"{paired_ratio(r, t):.2f}")
    return "\n".join(lines)


def main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.bench ddp", description=__doc__.split("\n\n")[1])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=8, help="timed steps (rounds) per configuration")
    p.add_argument("--timeline", metavar="PNG", help="also draw one step at 1 and 100 MB buckets")
    args = p.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores (others' work skews times: "
          "run under flock /tmp/labkit-bench.lock)")
    t0 = time.perf_counter()
    with labkit.Cluster(args.ranks, spares=0) as c:
        print(f"{c!r}\n")
        out = combine(c.run(measure.bench_ranks, steps=args.steps, timeout=3600))
        print(table(out, args.ranks))
        print()
        print(summary(out))
        if args.timeline:
            runs = {f"bucket_cap_mb={cap}": c.run(timeline.traced_step, cap) for cap in (1, 100)}
            timeline.plot_timelines(runs, args.timeline)
            for lbl, ranks in runs.items():
                print(f"{lbl}: overlap by rank " + ", ".join(f"{r['overlap']:.0%}" for r in ranks) +
                      f"; step {max(r['step'] for r in ranks) * 1e3:.0f} ms; figure {args.timeline}")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
