"""python -m labkit.bench ddp [--ranks 4] [--steps 8] [--timeline out.png]

labkit's naive, flat and bucketed DDP against torch's DistributedDataParallel on one model
(TinyGPT, 13.8 M parameters, 55 MB of fp32 gradients) at 4 gloo ranks, in one run: step time
(median of the slowest rank's), bucket_cap_mb 1/5/25/100 with and without
gradient_as_bucket_view for labkit's bucketed DDP and torch's, gradient+bucket memory (tensor
storages counted exactly), and bytes sent per rank per step against the ring's 2(N-1)/N x
gradient size. Other work on the machine skews the times; the ratios are paired.
A thin command line over labkit.ddp.benchmark and labkit.ddp.timeline.
"""
import argparse
import os
import sys
import time

import labkit
from labkit.ddp import benchmark, timeline


def main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.bench ddp", description=__doc__.split("\n\n")[1])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=8, help="timed steps (rounds) per configuration")
    p.add_argument("--timeline", metavar="PNG", help="also draw one step at 1 and 100 MB buckets")
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work skews times)")
    t0 = time.perf_counter()
    with labkit.Cluster(args.ranks, spares=0) as c:
        print(f"{c!r}\n")
        out = benchmark.combine(c.run(benchmark.bench_ranks, steps=args.steps, timeout=3600))
        print(benchmark.table(out, args.ranks))
        print()
        print(benchmark.summary(out))
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
