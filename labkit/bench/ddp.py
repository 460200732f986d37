"""python -m labkit.bench ddp [--ranks 4] [--steps 3] [--rounds 2] [--timeline out.png]

labkit's naive, flat and bucketed DDP against torch's DistributedDataParallel on one model
(TinyGPT, 13.8 M parameters, 55 MB of fp32 gradients) at 4 gloo ranks, in one run: step time
(median of the slowest rank's), torch DDP over bucket_cap_mb 1/5/25/100 with and without
gradient_as_bucket_view, gradient+bucket memory (tensor storages counted exactly), and bytes
sent per rank per step against the ring's 2(N-1)/N x gradient size. Wrap it in
`flock /tmp/labkit-bench.lock` on a shared machine.
"""
import argparse
import os
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


def table(res: dict, n: int) -> str:
    grad = next(iter(res.values()))["grad_bytes"]
    ring = ring_bytes_per_rank(grad, n)
    torch_at = {lbl.split("torch DDP ")[1]: r["median"] for lbl, r in res.items()
                if lbl.startswith("torch DDP") and "view" not in lbl}
    rows = [f"gradient {grad / 1e6:.1f} MB; ring all-reduce formula 2(N-1)/N x gradient = "
            f"{ring / 1e6:.1f} MB per rank per step (N={n})", "",
            f"| {'variant':<26} | step ms | vs torch DDP same cap | sent MB/step | sent/formula | "
            "grad+bucket MB | / gradient |",
            f"| {'-' * 26} | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lbl, r in res.items():
        cap = lbl.split("bucketed ")[1] if "bucketed" in lbl else lbl.split("torch DDP ")[-1].replace(" view", "")
        vs = f"{r['median'] / torch_at[cap]:.2f}x" if cap in torch_at else ""
        mem = r.get("memory")
        rows.append(f"| {lbl:<26} | {r['median'] * 1e3:7.1f} | {vs:>8} | {r['sent'] / 1e6:7.1f} | "
                    f"{r['sent'] / ring:5.3f} | " +
                    (f"{mem / 1e6:7.1f} | {mem / grad:4.2f} |" if mem is not None else " | |"))
    return "\n".join(rows)


def summary(res: dict) -> str:
    lines = []
    for cap in (1, 5, 25, 100):
        ours, theirs = res.get(f"labkit bucketed {cap} MB"), res.get(f"torch DDP {cap} MB")
        if ours and theirs:
            ratio = ours["median"] / theirs["median"]
            lines.append(f"bucket_cap_mb={cap}: labkit bucketed / torch DDP step time = {ratio:.2f} "
                         f"({'within' if ratio <= 1.1 else 'OUTSIDE'} the 1.1x target)")
    if "labkit naive" in res and "labkit bucketed 25 MB" in res:
        lines.append(f"naive / bucketed 25 MB = {res['labkit naive']['median'] / res['labkit bucketed 25 MB']['median']:.2f}")
    return "\n".join(lines)


def main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.bench ddp", description=__doc__.split("\n\n")[1])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=3, help="timed steps per configuration per round")
    p.add_argument("--rounds", type=int, default=2, help="rounds over all configurations")
    p.add_argument("--timeline", metavar="PNG", help="also draw one step at 1 and 100 MB buckets")
    args = p.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores (others' work skews times: "
          "run under flock /tmp/labkit-bench.lock)")
    t0 = time.perf_counter()
    with labkit.Cluster(args.ranks, spares=0) as c:
        print(f"{c!r}\n")
        out = combine(c.run(measure.bench_ranks, steps=args.steps, rounds=args.rounds, timeout=3600))
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
