"""python -m labkit.bench many [--counts 1,4,8] [--world-size 4] [--runs 3] [--spares N]

A class on one node: time to first result when 1, 4 and 8 learners start a cluster at once.

Each learner is a separate process (as each learner's kernel is) that has imported labkit and
torch and waits; all of them are then told to go at the same moment, and each times
``labkit.Cluster(world_size)`` followed by its first ``run`` (an all_reduce) until the result is
back: what a learner waits for after pressing Shift-Enter on the first cluster cell. A round's
figure is the median over its learners and its slowest learner; the table shows the median of
those over `--runs` rounds, and each against one learner alone. The machine's cores, load average
and the world size are printed with it: on a 2-core machine, 8 clusters of 4 ranks are 32 ranks
and 8 zygotes on 2 cores, so expect them to be several times slower than one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _first():
    import torch
    import torch.distributed as dist
    import labkit
    t = torch.tensor([float(labkit.rank())])
    dist.all_reduce(t)
    return t.item()


def child(world_size: int, spares) -> None:
    """One learner: import, say ready, wait for the word, then time the first cluster cell."""
    import labkit
    import torch  # noqa: F401  (the kernel has it already when the learner starts a cluster)
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    c = labkit.Cluster(world_size, spares=spares, start_timeout=600)
    r = c.run(_first)
    took = time.perf_counter() - t0
    want = sum(range(world_size))
    c.close()
    print(json.dumps({"first_result": took, "startup": c.startup_seconds, "ok": r == [want] * world_size}),
          flush=True)


def one_round(n: int, world_size: int, spares, timeout: float = 900) -> list:
    """Start n learners, release them together; seconds to first result of each."""
    cmd = [sys.executable, "-m", "labkit.bench.many", "--child", str(world_size), str(spares)]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    try:
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"a learner process did not start: {line!r} (exit {p.poll()})")
        for p in procs:                            # the word, to all of them in a few microseconds
            p.stdin.write("go\n")
            p.stdin.flush()
        out = []
        for p in procs:
            data, _ = p.communicate(timeout=timeout)
            rec = json.loads(data.strip().splitlines()[-1])
            if not rec["ok"]:
                raise RuntimeError(f"a cluster returned a wrong all_reduce: {rec}")
            out.append(rec["first_result"])
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench many", description=__doc__.split("\n\n")[1])
    ap.add_argument("--counts", default="1,4,8", help="concurrent clusters per round (comma-separated)")
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3, help="rounds per count (the median is shown)")
    ap.add_argument("--spares", type=int, default=None, help="standby workers per cluster (default: world size)")
    a = ap.parse_args(argv)
    from labkit.tables import Table
    counts = [int(x) for x in a.counts.split(",")]
    spares = "none" if a.spares is None else a.spares
    rows, base = [], None
    load0 = os.getloadavg()[0]
    for n in counts:
        medians, slowest = [], []
        for _ in range(a.runs):
            times = one_round(n, a.world_size, spares)
            medians.append(statistics.median(times))
            slowest.append(max(times))
            print(f"  {n} cluster(s): " + ", ".join(f"{t:.1f}" for t in sorted(times)) + " s", flush=True)
        med, slow = statistics.median(medians), statistics.median(slowest)
        base = med if base is None and n == counts[0] else base
        rows.append([str(n), str(n * a.world_size), f"{med:.1f}", f"{slow:.1f}", f"{med / base:.2f}x"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(Table(["clusters", "ranks", "median s", "slowest s", f"median / {counts[0]} cluster(s)"], rows,
                title=f"Time to first result (Cluster({a.world_size}) + first run), median of {a.runs} rounds",
                notes=[f"{cores} cores; load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after; "
                       f"spares per cluster: {'world size' if a.spares is None else a.spares}"]))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(int(sys.argv[2]), None if sys.argv[3] == "none" else int(sys.argv[3]))
    else:
        sys.exit(main())
