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
  tests/runtime/test_runtime_speed.py guards.

Each figure is printed with its goal and "ok" or "MISS"; the exit status is 1 when one is missed.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

GOALS = {"cold": 0.7, "warm": 0.15, "class": 2.5, "zygotes/user": 1.0,   # figure -> largest
         "round trip": 20.0}                                                 # value allowed

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


def _echo_results(sock) -> None:
    from multiprocessing.connection import Connection
    conn = Connection(sock.detach())
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        conn.send(("result", msg[1], None))


class Exchange:
    """The exchange a trivial run is made of, without labkit: one small pickled message
    (pickled once) to each of `world_size` forked children over a Unix socket, and a pickled
    answer back from each, waited for with a selector. What labkit adds on top of it (the
    function pickled by value, the learner's folder and modules, output, events, failures,
    results through shared memory) is the round trip's ratio to this.

        with Exchange(4) as ex:
            seconds = ex.once()
    """

    def __init__(self, world_size: int):
        import selectors
        import socket
        from multiprocessing.connection import Connection
        self._conns, self._pids, self._i = [], [], 0
        self._sel = selectors.DefaultSelector()
        try:
            for _ in range(world_size):
                a, b = socket.socketpair()
                pid = os.fork()
                if pid == 0:                      # only echoes: safe after threads, no torch
                    a.close()
                    _echo_results(b)
                b.close()
                self._pids.append(pid)
                self._conns.append(Connection(a.detach()))
                self._sel.register(self._conns[-1].fileno(), selectors.EVENT_READ, self._conns[-1])
        except BaseException:
            self.close()
            raise

    def once(self) -> float:
        import pickle
        t0 = time.perf_counter()
        self._i += 1
        data = pickle.dumps(("call", self._i, b"x" * 600))
        for c in self._conns:
            c.send_bytes(data)
        left = len(self._conns)
        while left:
            for key, _ in self._sel.select():
                key.data.recv()
                left -= 1
        return time.perf_counter() - t0

    def close(self) -> None:
        self._sel.close()
        for c in self._conns:
            c.close()
        for pid in self._pids:
            os.waitpid(pid, 0)
        self._conns, self._pids = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def round_trip_against_exchange(cluster, n: int) -> tuple:
    """(round trip, exchange) medians, seconds: a trivial `cluster.run` and the same exchange
    without labkit (`Exchange`), one after the other call by call, so that both meet the same
    load and the same placement of processes on cores."""
    runs, exchanges = [], []
    with Exchange(cluster.world_size) as ex:
        for _ in range(n):
            t0 = time.perf_counter()
            cluster.run(_nothing)
            runs.append(time.perf_counter() - t0)
            exchanges.append(ex.once())
    return statistics.median(runs[n // 10:]), statistics.median(exchanges[n // 10:])


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
        print(f"  {name:12s} {ratio:7.2f}x   goal <= {goal:g}x   {'ok' if ok else 'MISS'}"
              f"   ({details.get(name, '')})")
    missed = [name for name, _, _, ok in rows if not ok]
    print("all goals met" if not missed else f"MISS: {', '.join(missed)}")
    return 1 if missed else 0


def main(argv=None) -> int:
    from labkit.bench import start_class
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
            pipe = pipe_pingpong_seconds(2000)
            rt = round_trip_seconds(n, a.calls)
            import labkit
            with labkit.Cluster(n, backend="gloo") as c:
                rt2, floor = round_trip_against_exchange(c, 1000)
            ratios["round trip"] = rt / pipe
            details["round trip"] = (f"{rt * 1e3:.2f} ms; pipe ping-pong {pipe * 1e6:.0f} us; the "
                                     f"same exchange without labkit {floor * 1e6:.0f} us, "
                                     f"{rt2 / floor:.1f}x, run by run")
    finally:
        start_class.stop_zygotes(z for z in zygotes if z)
    print(f"  T (fresh import of torch and the preloads) = {T:.2f} s; load now {os.getloadavg()[0]:.1f}")
    return report(ratios, details)


if __name__ == "__main__":
    sys.exit(main())
