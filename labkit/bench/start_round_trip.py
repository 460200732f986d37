"""The round-trip figure of `python -m labkit.bench start` (issue 36): a trivial `run` on n ranks
against a pipe ping-pong between two processes (the issue's goal, `pipe_pingpong_seconds`), and
against the exchange it is made of without labkit, alternated call by call (`Exchange`,
`round_trip_against_exchange`: what tests/runtime/test_runtime_speed.py guards).
"""
import os
import statistics
import time


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


def round_trip_seconds(cluster, n: int) -> float:
    """Median time of a trivial `cluster.run`, after 10 to warm up."""
    for _ in range(10):
        cluster.run(_nothing)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        cluster.run(_nothing)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _nothing():
    return None


def figure(world_size: int, calls: int) -> tuple:
    """(the round trip against the pipe ping-pong, the line's details): a trivial run on
    `world_size` ranks (median of `calls`), and on the same cluster the round trip against the
    same exchange without labkit, run by run."""
    import labkit
    pipe = pipe_pingpong_seconds(2000)
    with labkit.Cluster(world_size, backend="gloo") as c:
        rt = round_trip_seconds(c, calls)
        run, floor = round_trip_against_exchange(c, 1000)
    return rt / pipe, (f"{rt * 1e3:.2f} ms; pipe ping-pong {pipe * 1e6:.0f} us; the same exchange "
                       f"without labkit {floor * 1e6:.0f} us, {run / floor:.1f}x, run by run")
