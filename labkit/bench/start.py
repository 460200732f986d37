"""python -m labkit.bench start [--repeat 3] [--calls 300] [--world-size 4]

Time to first result (issue 36), each figure a ratio against a reference measured in the same run:

- T: a fresh `python -c "import torch, torch._dynamo, torch.distributed.tensor,
  torch.distributed.fsdp"` (median of --repeat);
- cold: a fresh process that has imported torch (a notebook's first cell), no cluster of this
  user open: from there to the first `all_reduce` result of `Cluster(n)`; goal <= 0.7 x T;
- warm: the same while another process of this user holds a `Cluster(n)` open (a notebook
  opened after another one); goal <= 0.15 x T;
- round trip: a trivial `run` on n ranks (median of --calls), against a pipe ping-pong between
  two processes in the same run (median); goal <= 20 x the ping-pong (the milliseconds are shown
  too, for the issue's 1 ms). The ping-pong: a small pickled message to one child process and
  back over a multiprocessing.Pipe.

Each figure is printed with its goal and "ok" or "MISS"; the exit status is 1 when one is missed.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

GOALS = {"cold": 0.7, "warm": 0.15, "round trip": 20.0}   # figure -> largest ratio allowed

_T = "import torch, torch._dynamo, torch.distributed.tensor, torch.distributed.fsdp"

# A notebook: import torch first, then the clock starts; prints the seconds to the first result.
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
"""

# Another notebook of the same user, holding its cluster open until its stdin closes.
_HOLDER = r"""
import sys
import labkit
c = labkit.Cluster(int(sys.argv[1]), backend="gloo")
c.run(lambda: None)
print("READY", flush=True)
sys.stdin.read()
c.close()
"""

def _env() -> dict:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def fresh_import_seconds() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _T], check=True, env=_env())
    return time.perf_counter() - t0


def first_result_seconds(world_size: int) -> float:
    out = subprocess.run([sys.executable, "-c", _FIRST_RESULT, str(world_size)], check=True,
                         capture_output=True, text=True, env=_env()).stdout
    return float(next(l for l in out.splitlines() if l.startswith("FIRST ")).split()[1])


def warm_first_result_seconds(world_size: int) -> float:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(world_size)], env=_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline().strip() != "READY":
            raise RuntimeError("the first notebook's cluster did not start")
        return first_result_seconds(world_size)
    finally:
        holder.stdin.close()
        holder.wait(60)


def _echo(conn) -> None:
    while True:
        msg = conn.recv()
        if msg is None:
            break
        conn.send(msg)


def pipe_pingpong_seconds(n: int) -> float:
    """Median time of a small pickled message there and back over a multiprocessing.Pipe to one
    child process (as the notebook's messages to a rank go: pickled, over a socket)."""
    import multiprocessing
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("spawn").Process(target=_echo, args=(theirs,), daemon=True)
    child.start()
    times = []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            ours.send(("call", i))
            ours.recv()
            times.append(time.perf_counter() - t0)
    finally:
        ours.send(None)
        child.join(10)
    return statistics.median(times[n // 10:])


def round_trip_seconds(world_size: int, n: int) -> float:
    import labkit
    with labkit.Cluster(world_size, backend="gloo") as c:
        for _ in range(10):
            c.run(_nothing)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            c.run(_nothing)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _nothing():
    return None


def verdicts(ratios: dict) -> list:
    """(figure, ratio, goal, ok) for every figure measured, in GOALS' order."""
    return [(name, ratios[name], goal, ratios[name] <= goal) for name, goal in GOALS.items()
            if name in ratios]


def report(ratios: dict, details: dict) -> int:
    rows = verdicts(ratios)
    for name, ratio, goal, ok in rows:
        print(f"  {name:11s} {ratio:7.2f}x   goal <= {goal:g}x   {'ok' if ok else 'MISS'}"
              f"   ({details.get(name, '')})")
    missed = [name for name, _, _, ok in rows if not ok]
    print("all goals met" if not missed else f"MISS: {', '.join(missed)}")
    return 1 if missed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench start", description=__doc__.split("\n\n")[1])
    ap.add_argument("--repeat", type=int, default=3, help="runs of T, cold and warm (median)")
    ap.add_argument("--calls", type=int, default=300, help="trivial runs for the round trip")
    ap.add_argument("--world-size", type=int, default=4)
    a = ap.parse_args(argv)
    n = a.world_size
    print(f"labkit.bench start: world size {n}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    T = statistics.median(fresh_import_seconds() for _ in range(a.repeat))
    cold = statistics.median(first_result_seconds(n) for _ in range(a.repeat))
    warm = statistics.median(warm_first_result_seconds(n) for _ in range(a.repeat))
    pipe = pipe_pingpong_seconds(2000)
    rt = round_trip_seconds(n, a.calls)
    print(f"  T (fresh import of torch and the preloads) = {T:.2f} s; pipe ping-pong = "
          f"{pipe * 1e6:.0f} us; load now {os.getloadavg()[0]:.1f}")
    return report({"cold": cold / T, "warm": warm / T, "round trip": rt / pipe},
                  {"cold": f"{cold:.2f} s", "warm": f"{warm:.2f} s",
                   "round trip": f"{rt * 1e3:.2f} ms"})


if __name__ == "__main__":
    sys.exit(main())
