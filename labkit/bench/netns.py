"""What the ranks' private network costs (labkit/runtime/local/netns.py), as ratios in one run.

    python -m labkit.bench netns                   # namespace on / off (LABKIT_NETNS=0), alternated
    python -m labkit.bench netns --against DIR     # this checkout / another (e.g. main's), alternated

Each sample: the wall time of `Cluster(4)` (start to ready) and the median round trip of a run
that does nothing (50 of them). `--against` starts one process per sample, alternating the two
checkouts (PYTHONPATH), so that both see the same load.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SAMPLE = """
import json, os, statistics, time
import labkit
t0 = time.perf_counter()
c = labkit.Cluster({n}, backend="gloo", timeout=120)
start = time.perf_counter() - t0
c.run(lambda: None)
rts = []
for _ in range({runs}):
    t = time.perf_counter(); c.run(lambda: None); rts.append(time.perf_counter() - t)
c.close()
print(json.dumps([start, statistics.median(rts)]))
"""


def _sample(n: int, runs: int, root: str = None, env: dict = None) -> tuple:
    e = dict(os.environ, **(env or {}))
    if root:
        e["PYTHONPATH"] = root
    out = subprocess.run([sys.executable, "-c", SAMPLE.format(n=n, runs=runs)], env=e, cwd=root,
                         capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench netns")
    ap.add_argument("--against", help="another labkit checkout to compare this one with")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if a.against:
        kinds = {"this checkout": dict(root=here), a.against: dict(root=os.path.abspath(a.against))}
    else:
        kinds = {"namespace": dict(root=here, env={"LABKIT_NETNS": "1"}),
                 "LABKIT_NETNS=0": dict(root=here, env={"LABKIT_NETNS": "0"})}
    names = list(kinds)
    got = {k: [] for k in names}
    for i in range(a.samples):
        for k in (names if i % 2 == 0 else names[::-1]):
            got[k].append(_sample(a.ranks, a.runs, **kinds[k]))
    med = {k: [statistics.median(s[j] for s in got[k]) for j in (0, 1)] for k in names}
    first, second = names
    print(f"Cluster({a.ranks}) start, {first} / {second}: {med[first][0] / med[second][0]:.2f}")
    print(f"a trivial run's round trip, {first} / {second}: {med[first][1] / med[second][1]:.2f}")
    print(f"(medians of {a.samples} samples each, alternated; {a.runs} round trips per sample)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
