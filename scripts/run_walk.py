"""The labkit files one `cluster.run(f)` passes through on the notebook's side, in order; and
the round trip of a trivial run as a ratio to a pipe ping-pong (tests/runtime/test_runtime_speed.py).

    .venv/bin/python scripts/run_walk.py              # the walk of one run on a warm Cluster(2)
    .venv/bin/python scripts/run_walk.py --speed 5    # 5 rounds of the round-trip ratio
    .venv/bin/python scripts/run_walk.py --compare DIR 12   # this checkout against another one
                                                        # (e.g. `git archive main | tar -x -C DIR`)

--compare starts a warm Cluster(2) from each checkout at once and lets them take turns (12
rounds, the order swapped every round): a round is the median of 50 trivial runs divided by a
pipe ping-pong measured just before, so both sides see the same load.

The walk: sys.setprofile on the notebook's main thread during one `cluster.run(f)` (after
three runs that warm it up). Each call from one labkit file into another is noted. Printed: the
files in the order they are first entered, each with the files it calls; then every *return to
a file already left*, once per pair of files:
- a callback: a call into a file that is still on the stack below the caller (collect calling
  back into the cluster that called it);
- a second visit: a file calls a function of file B, then goes into another file, then calls
  another function of B (the cluster going to wire to pickle, elsewhere, then to wire again to
  send).
A return to the caller is not counted, nor a loop over the same functions, nor the end of a
`with` block (its `__exit__`, a generator resumed by contextlib): a `with` is one visit.
"""
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _trivial():
    return 1


def _labkit_dir() -> str:
    import labkit
    return os.path.dirname(os.path.abspath(labkit.__file__)) + os.sep


def _innermost(frame, top: str):
    while frame is not None:
        if frame.f_code.co_filename.startswith(top):
            return frame
        frame = frame.f_back
    return None


def trace_one_run(cluster, fn=_trivial):
    """The calls between labkit files during one run: [(caller file, callee file, callee
    function, files further down the stack)]."""
    top = _labkit_dir()
    calls, frames = [], set()

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(top):
            return
        if frame.f_code.co_name == "__exit__" or frame in frames:
            return                                # the end of a `with`, a generator resumed
        frames.add(frame)
        below, f = [], frame.f_back
        while f is not None:
            if f.f_code.co_filename.startswith(top):
                below.append(f.f_code.co_filename[len(top):])
            f = f.f_back
        me = frame.f_code.co_filename[len(top):]
        if below and below[0] != me:
            calls.append((below[0], me, frame.f_code.co_qualname, frozenset(below[1:])))

    sys.setprofile(profile)
    try:
        cluster.run(fn)
    finally:
        sys.setprofile(None)
    return calls


def walk(calls) -> tuple:
    """(files in order of first entry, {file: files it calls}, [(kind, caller, callee)])."""
    files, edges, again, last, used = [], {}, [], {}, set()
    for caller, callee, fn, below in calls:
        for f in (caller, callee):
            if f not in edges:
                files.append(f)
                edges[f] = []
        before = callee in edges[caller]
        if not before:
            edges[caller].append(callee)
        kind = None
        if callee in below:
            kind = "callback"
        elif before and last.get(caller) != callee and (caller, callee, fn) not in used:
            kind = "second visit"
        last[caller] = callee
        used.add((caller, callee, fn))
        if kind and (kind, caller, callee) not in again:
            again.append((kind, caller, callee))
    return files, edges, again


def pipe_pingpong(n: int = 300) -> float:
    sys.path.insert(0, os.path.join(ROOT, "tests", "runtime"))
    from test_runtime_speed import _pipe_pingpong
    return _pipe_pingpong(n)


def _round(cluster) -> float:
    pipe = pipe_pingpong()
    ts = []
    for _ in range(50):
        t = time.perf_counter()
        cluster.run(_trivial)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) / pipe


def compare(other: str, rounds: int) -> None:
    import subprocess
    me = os.path.abspath(__file__)
    sides = {name: subprocess.Popen([sys.executable, me, "--turns"], cwd=d, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
             for name, d in ((other, os.path.abspath(other)), ("this checkout", ROOT))}
    for p in sides.values():
        while p.stdout.readline().strip() != "ready":
            pass
    got = {name: [] for name in sides}
    for i in range(rounds):
        for name, p in (list(sides.items())[::1 if i % 2 == 0 else -1]):
            p.stdin.write("go\n")
            p.stdin.flush()
            got[name].append(float(p.stdout.readline()))
    for p in sides.values():
        p.stdin.close()
        p.wait()
    for name, r in got.items():
        print(f"{name}: round trip / pipe ping-pong, median {statistics.median(r):.0f}, "
              f"best {min(r):.0f}; rounds {[round(x) for x in r]}")


def main() -> None:
    if "--compare" in sys.argv:
        i = sys.argv.index("--compare")
        return compare(sys.argv[i + 1], int(sys.argv[i + 2]) if len(sys.argv) > i + 2 else 12)
    if "--turns" in sys.argv:                     # one side of --compare: a round per line read
        sys.path.insert(0, os.getcwd())           # the labkit of the checkout it runs in
        import labkit
        assert labkit.__file__.startswith(os.getcwd()), labkit.__file__
        with labkit.Cluster(2) as cluster:
            for _ in range(30):
                cluster.run(_trivial)
            print("ready", flush=True)
            for _ in sys.stdin:
                print(f"{_round(cluster):.1f}", flush=True)
        return
    import labkit
    speed = "--speed" in sys.argv
    with labkit.Cluster(2) as cluster:
        for _ in range(3):
            cluster.run(_trivial)
        if speed:
            rounds = int(sys.argv[sys.argv.index("--speed") + 1]) if len(sys.argv) > 2 else 3
            for _ in range(10):
                cluster.run(_trivial)
            for _ in range(rounds):
                print(f"round trip / pipe ping-pong: {_round(cluster):.0f}")
            return
        files, edges, again = walk(trace_one_run(cluster))
    print(f"{len(files)} labkit files entered by one cluster.run, in order (-> the files each calls):")
    for f in files:
        print(f"  {f}" + (f"  -> {', '.join(edges[f])}" if edges[f] else ""))
    print(f"{len(again)} returns to a file already left:")
    for kind, caller, callee in again:
        print(f"  {kind}: {caller} -> {callee}")


if __name__ == "__main__":
    main()
