"""The round trip of a trivial run, as a ratio to a plain pipe ping-pong measured in the same test.

A trivial `cluster.run` on 2 ranks took 1.3 ms until two small writes in a row on the control
connection met Nagle's algorithm and the rank's delayed acknowledgement: 44 ms, unnoticed for
a release. Absolute times swing with the machine's load; the ratio to the cheapest possible
exchange between two processes (one pipe write each way) swings much less. Measured on the
course's 2-core machine: 200-520x under load 7 (1.5-4.2 ms against 7.5 us), about 5,500x with
the 44 ms regression. The best of three rounds must stay under MAX_RATIO.
"""
import os
import statistics
import time

import pytest

MAX_RATIO = 1500


def _pipe_pingpong(n: int = 300) -> float:
    """Median seconds for 32 bytes there and back between this process and a forked child."""
    a_r, b_w = os.pipe()
    b_r, a_w = os.pipe()
    pid = os.fork()
    if pid == 0:                                  # the child only echoes: safe to fork here
        try:
            os.close(a_r)
            os.close(a_w)
            while True:
                d = os.read(b_r, 64)
                if not d:
                    break
                os.write(b_w, d)
        finally:
            os._exit(0)
    os.close(b_r)
    os.close(b_w)
    ts = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(a_w, b"x" * 32)
            os.read(a_r, 64)
            ts.append(time.perf_counter() - t)
    finally:
        os.close(a_w)
        os.waitpid(pid, 0)
        os.close(a_r)
    return statistics.median(ts)


def _trivial():
    return 1


@pytest.mark.cluster
def test_round_trip_against_a_pipe_ping_pong(cluster2):
    for _ in range(10):
        cluster2.run(_trivial)
    rounds = []
    for _ in range(3):
        pipe = _pipe_pingpong()
        ts = []
        for _ in range(50):
            t = time.perf_counter()
            cluster2.run(_trivial)
            ts.append(time.perf_counter() - t)
        run = statistics.median(ts)
        rounds.append((run / pipe, run, pipe))
        if run / pipe < MAX_RATIO:
            break
    best = min(rounds)
    assert best[0] < MAX_RATIO, (
        f"a trivial run on 2 ranks takes {best[1] * 1e3:.2f} ms, {best[0]:.0f}x a pipe ping-pong "
        f"({best[2] * 1e6:.1f} us); it should be under {MAX_RATIO}x (about 1 ms). Two small writes "
        f"in a row on a TCP control connection without TCP_NODELAY cost 40 ms: see frames.Conn. "
        f"Rounds (ratio, s, s): {rounds}")


MAX_OVER_EXCHANGE = 4.5


_EXCHANGE_ROUNDS = r"""
import json, labkit
from labkit.bench.start_round_trip import round_trip_against_exchange
with labkit.Cluster(4, backend="gloo") as c:
    for _ in range(10):
        c.run(int)
    rounds = []
    for _ in range(5):
        run, floor = round_trip_against_exchange(c, 300)
        rounds.append((run / floor, run, floor))
        if run / floor < %r:
            break
print(json.dumps(rounds))
"""


@pytest.mark.cluster
def test_round_trip_on_four_ranks_against_the_same_exchange_without_labkit():
    """Issue 36's round trip, guarded: a trivial run on 4 ranks against the exchange it is made
    of without labkit (a pickled message to 4 forked children and an answer back from each,
    labkit/bench/start_round_trip.Exchange), the two alternated call by call so that both meet the same
    load. Measured on the course's 2-core machine, rounds of 300: 2.7-3.6x (0.44-0.62 ms
    against 139-213 us), 2.6-3.6x beside two busy loops, 3.7-3.8x inside `python -m labkit.bench
    start`; 3.55-4.3x before the notebook stopped reading each message with a 1 MiB os.read and
    the rank stopped handing each task from one thread to another (0.54-0.71 ms). The bound
    leaves room for that spread: it catches a run that costs half again as much (a rank that
    sleeps 0.3 ms per task: 4.9x, best of 5), not the step of 25% that change was. Best of up to 5 rounds.
    In a fresh process, as a notebook's: in CI's session every imported test file is a learner's
    module that each task carries (learner.py): about 100 of them, a snapshot of 236 us and
    9.5 kB per run, and the run took 1.1 ms there (6.5x)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _EXCHANGE_ROUNDS % MAX_OVER_EXCHANGE], check=True,
                         capture_output=True, text=True, timeout=240).stdout
    rounds = [tuple(r) for r in json.loads(out.strip().splitlines()[-1])]
    best = min(rounds)
    assert best[0] < MAX_OVER_EXCHANGE, (
        f"a trivial run on 4 ranks takes {best[1] * 1e3:.2f} ms, {best[0]:.1f}x the same exchange "
        f"without labkit ({best[2] * 1e6:.0f} us); it should be under {MAX_OVER_EXCHANGE}x. "
        f"What a run adds per rank is in runtime/group.py (send), collect.py (wait, read) and "
        f"worker.py (_next, _serve). Rounds (ratio, s, s): {rounds}")
