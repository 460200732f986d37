"""python -m labkit.bench start [--repeat 3] [--calls 300] [--world-size 4] [--users A,B --python P]

Time to first result (issue 36), each figure a ratio against a reference measured in the same run:

- T: a fresh `python -c "import torch, torch._dynamo, torch.distributed.tensor,
  torch.distributed.fsdp"` (median of --repeat);
- cold: a fresh process that has imported torch (a notebook's first cell), no zygote of this
  user running (each try gets a zygote key of its own, labkit/runtime/local/userzygote.py): from
  there to the first `all_reduce` result of `Cluster(n)`; goal <= 0.7 x T;
- warm: the same after another notebook of this user has run a cluster and closed it (its
  zygote waits); goal <= 0.15 x T;
- class: 8 kernels of 2 users (--users, as root; else 8 of this user, said so) start `Cluster(n)`
  at the same moment: the slowest first result against one cold start; goal <= 2.5; and from
  /proc, each user's ranks forked by that user's own zygote (start_class.py);
- round trip: a trivial `run` on n ranks (median of --calls), against a pipe ping-pong between
  two processes in the same run (median); goal <= 20 x the ping-pong (the milliseconds are shown
  too, for the issue's 1 ms). The ping-pong: a small pickled message to one child process and
  back over a multiprocessing.Pipe. Shown beside it: the exchange of a trivial run without
  labkit (`Exchange`: to n forked children and back, run by run), what
  tests/runtime/test_runtime_speed.py guards (start_round_trip.py);
- kernel: from Jupyter starting a notebook's kernel to its first cell's result (`import torch`
  and an op), a warm kernel (forked by the learner's kernels' server) against a fresh one, in
  turn, median of --repeat each; goal <= 0.5 x the fresh one (start_kernel.py).

Each figure is printed with its goal and "ok" or "MISS"; the exit status is 1 when one is missed.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

GOALS = {"cold": 0.7, "warm": 0.15, "class": 2.5, "zygotes/user": 1.0,   # figure -> largest
         "round trip": 20.0, "kernel": 0.5}                                  # value allowed

_T = "import torch, torch._dynamo, torch.distributed.tensor, torch.distributed.fsdp"

# A notebook: import torch first, then the clock starts; prints the seconds to the first result
# and the zygote's pid (to stop it when the figure is taken).
_FIRST_RESULT = r"""
import sys, time
import torch
t0 = time.perf_counter()
import labkit

def step():
    import torch, torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()

with labkit.Cluster(int(sys.argv[1]), backend="gloo") as c:
    assert c.run(step) == [float(c.world_size)] * c.world_size
    print(f"FIRST {time.perf_counter() - t0:.6f}", flush=True)
    z = c.source.pool.zygote
    print(f"ZYGOTE {z.proc.pid if z is not None and z.shared else 0}", flush=True)
"""


def _env(key: str = None) -> dict:
    """The environment of a notebook of this run; `key`: its zygote's own (the idle time is
    part of a zygote's key: a fresh zygote for a fresh key)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if key is not None:
        env["LABKIT_ZYGOTE_IDLE"] = f"600.{key}"
    return env


def fresh_key() -> str:
    return f"{os.getpid()}{time.monotonic_ns() % 10**9}"


def fresh_import_seconds() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _T], check=True, env=_env())
    return time.perf_counter() - t0


def first_result(world_size: int, env: dict) -> tuple:
    """(seconds to the first result, the zygote's pid or 0) of one notebook."""
    out = subprocess.run([sys.executable, "-c", _FIRST_RESULT, str(world_size)], check=True,
                         capture_output=True, text=True, env=env).stdout
    said = dict(line.split() for line in out.splitlines() if line.startswith(("FIRST ", "ZYGOTE ")))
    return float(said["FIRST"]), int(said["ZYGOTE"])


def cold_seconds(world_size: int, zygotes: set) -> float:
    took, z = first_result(world_size, _env(fresh_key()))
    zygotes.add(z)
    return took


def warm_seconds(world_size: int, env: dict, zygotes: set) -> float:
    """A notebook after another one of the same user (same key) ran its cluster and closed it;
    the first left its zygote (and the learner read a few lines: 2 s)."""
    _, z = first_result(world_size, env)
    zygotes.add(z)
    time.sleep(2.0)
    took, z = first_result(world_size, env)
    zygotes.add(z)
    return took


def verdicts(ratios: dict) -> list:
    """(figure, ratio, goal, ok) for every figure measured, in GOALS' order."""
    return [(name, ratios[name], goal, ratios[name] <= goal) for name, goal in GOALS.items()
            if name in ratios]


def report(ratios: dict, details: dict) -> int:
    rows = verdicts(ratios)
    for name, ratio, goal, ok in rows:
        print(f"  {name:12s} {ratio:7.2f}x   goal <= {goal:g}x   {'ok' if ok else 'MISS'}"
              f"   ({details.get(name, '')})")
    missed = [name for name, _, _, ok in rows if not ok]
    print("all goals met" if not missed else f"MISS: {', '.join(missed)}")
    return 1 if missed else 0


def main(argv=None) -> int:
    from labkit.bench import start_class, start_kernel, start_round_trip
    ap = argparse.ArgumentParser(prog="python -m labkit.bench start", description=__doc__.split("\n\n")[1])
    ap.add_argument("--repeat", type=int, default=3, help="runs of T, cold and warm (median)")
    ap.add_argument("--calls", type=int, default=300, help="trivial runs for the round trip")
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--users", default="", help="the class's two users, as root (e.g. lktclass1,lktclass2)")
    ap.add_argument("--python", default=sys.executable, help="an interpreter the class's users can run")
    ap.add_argument("--skip", default="", help="figures not to take (comma-separated)")
    a = ap.parse_args(argv)
    n, skip, zygotes = a.world_size, set(a.skip.split(",")), set()
    print(f"labkit.bench start: world size {n}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    ratios, details = {}, {}
    try:
        T = statistics.median(fresh_import_seconds() for _ in range(a.repeat))
        print(f"  T = {T:.2f} s", flush=True)
        cold = statistics.median(cold_seconds(n, zygotes) for _ in range(a.repeat))
        ratios["cold"], details["cold"] = cold / T, f"{cold:.2f} s"
        print(f"  cold = {cold:.2f} s", flush=True)
        if "warm" not in skip:
            env = _env(fresh_key())
            warm = statistics.median(warm_seconds(n, env, zygotes) for _ in range(a.repeat))
            ratios["warm"], details["warm"] = warm / T, f"{warm:.2f} s"
            print(f"  warm = {warm:.2f} s", flush=True)
        if "class" not in skip:
            users, who = start_class.users_for(a.users)
            one = cold_seconds(n, zygotes)
            times, by_user = start_class.class_round(users, n, _env(fresh_key()), a.python)
            zygotes.update(z for zs in by_user.values() for z in zs)
            ratios["class"] = max(times) / one
            details["class"] = f"slowest {max(times):.2f} s vs one cold {one:.2f} s; {who}"
            print(f"  class: {details['class']}", flush=True)
            ratios["zygotes/user"] = max(len(zs) for zs in by_user.values())
            details["zygotes/user"] = "the ranks' parents, from /proc: " + "; ".join(
                f"uid {u}: {sorted(zs)}" for u, zs in by_user.items())
        if "round trip" not in skip:
            ratios["round trip"], details["round trip"] = start_round_trip.figure(n, a.calls)
        if "kernel" not in skip:
            ratios["kernel"], details["kernel"] = start_kernel.figure(a.repeat)
            print(f"  kernel: {details['kernel']}", flush=True)
    finally:
        start_class.stop_zygotes(z for z in zygotes if z)
    print(f"  T (fresh import of torch and the preloads) = {T:.2f} s; load now {os.getloadavg()[0]:.1f}")
    return report(ratios, details)


if __name__ == "__main__":
    sys.exit(main())
