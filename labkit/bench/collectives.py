"""python -m labkit.bench collectives [--world-size 4] [--sizes 4K,1M,64M] [--iters N] [--plot busbw.png]

Bandwidth of every collective in the convention of nccl-tests: time, algbw and busbw per size,
torch's collectives next to labkit's ring and naive all-reduce, interleaved in one run.
The measurement lives in `labkit.comm.busbw` (the notebooks call it there); this is its
command line. On a machine that others share, run it when the machine is otherwise quiet.
"""
import argparse
import sys

from labkit.comm.busbw import DEFAULT_SIZES, OPS, human, observations, plot, sweep, table


def parse_size(text: str) -> int:
    """'4K' -> 4096, '1M' -> 1 << 20, '512' -> 512."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * mult[text[-1]]) if text[-1] in mult else int(text)


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
    for line in observations(rows):
        print("# " + line)
    if a.plot:
        plot(rows, a.plot)
        print(f"# plot: {a.plot}")
    return 0
