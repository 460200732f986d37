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
