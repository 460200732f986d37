"""python -m labkit.bench runtime [--repeat 2] [--no-remote]

The figures a change to the runtime must keep, in one table (issue: the runtime as one idea):

- round trip of a trivial task on 4 ranks (median of 200, after 20 warm-up runs);
- cold start: `Cluster(4)` until every rank has joined the process group;
- recovery: from the failure being reported to the next run's result, after one failure
  (a rank crashed) and the worst of three failures in a row (crash, hang, interrupt);
- a 256 MB tensor as a result of one rank and as an argument, seconds;
- the remote example (two torchrun nodes on this machine over TLS): seconds from starting
  torchrun to the first result, and from a hang to the next result (torchrun restarts ranks).

Each figure is printed for every repeat, so the run-to-run spread is in the same table. The
script uses only what every version of labkit since the remote ranks landed has, so the same
file measures an older checkout (PYTHONPATH=old/tree python labkit/bench/runtime.py).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from labkit.bench.cluster_data import FAILURES, _tiny, _touch, fail   # the same tasks as bench cluster


def _big_result(mb):
    import labkit
    import torch
    return torch.ones(mb * 2**20 // 4) if labkit.rank() == 0 else None


def _one_repeat(n: int) -> dict:
    import labkit
    import torch
    out = {}
    t0 = time.perf_counter()
    c = labkit.Cluster(n, backend="gloo", timeout=60)
    out["cold start (s)"] = time.perf_counter() - t0
    try:
        for _ in range(20):
            c.run(_tiny)
        ts = []
        for _ in range(200):
            t = time.perf_counter()
            c.run(_tiny)
            ts.append(time.perf_counter() - t)
        out["round trip, 4 ranks (ms)"] = statistics.median(ts) * 1e3
        times = []
        for how in FAILURES:
            c.wait_for_spares()
            fail(c, how)
            t = time.perf_counter()
            c.run(_tiny)
            times.append(time.perf_counter() - t)
        out["recovery, one failure (s)"] = times[0]
        out["recovery, worst of 3 in a row (s)"] = max(times)
        c.run(_tiny)
        t = time.perf_counter()
        got = c.run(_big_result, 256)
        out["256 MB result (s)"] = time.perf_counter() - t
        del got
        a = torch.ones(256 * 2**20 // 4)
        t = time.perf_counter()
        c.run(_touch, a)
        out["256 MB argument (s)"] = time.perf_counter() - t
    finally:
        c.close()
    return out


def _remote() -> dict:
    """Run examples/remote_on_one_machine.py and read its two times."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(os.environ.get("LABKIT_ROOT", root), "examples", "remote_on_one_machine.py")
    try:
        p = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        return {}
    found = re.findall(r"^result .*? ([0-9.]+) s ", p.stdout, re.M)
    if len(found) < 2:
        print(p.stdout[-2000:], p.stderr[-2000:], file=sys.stderr)
        return {}
    return {"remote: first result (s)": float(found[0]), "remote: hang to next result (s)": float(found[1])}


def main(argv=None) -> int:
    import torch
    p = argparse.ArgumentParser(prog="python -m labkit.bench runtime")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--no-remote", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = {}
    for _ in range(a.repeat):
        r = _one_repeat(a.world_size)
        if not a.no_remote:
            r.update(_remote())
        for k, v in r.items():
            rows.setdefault(k, []).append(v)
    import labkit
    print(f"labkit.bench runtime: {a.world_size} gloo ranks, {os.cpu_count()} cores, "
          f"labkit from {os.path.dirname(labkit.__file__)}, load {os.getloadavg()[0]:.1f}")
    for k, vs in rows.items():
        print(f"{k:38} " + "  ".join(f"{v:8.3f}" for v in vs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
