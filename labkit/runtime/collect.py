"""Waiting for one task on every rank: results, output, events, failures, deaths and hangs.

One loop on the notebook's main thread selects over every rank's control connection and
output pipe, so prints reach the cell as they happen and in order per rank. A rank's output
is flushed into its pipe before its result is sent, so after the last result one more drain
shows everything the task printed.
"""
import os
import selectors
import signal
import time

from collections import namedtuple

from labkit.runtime import errors, wire

Event = namedtuple("Event", "rank time data")   # one labkit.emit(...) from a rank
GRACE_S = 0.5      # after a rank fails, how long the others get to finish before they are stopped


class Outcome:
    def __init__(self, n: int):
        self.results = [None] * n
        self.failures = {}          # rank -> errors.Failure
        self.dead = {}              # rank -> how it died
        self.pending = set(range(n))
        self.timed_out = False
        self.stuck = {}             # rank -> where it was

    def result(self, cluster, label: str, timeout: float) -> list:
        __tracebackhide__ = True
        if not (self.failures or self.dead or self.pending):
            return self.results
        restarted = bool(self.dead or self.pending)
        if self.timed_out and not self.failures and not self.dead:
            done = [r for r in range(len(self.results)) if r not in self.pending]
            raise errors.RankTimeout(errors.timeout_message(label, timeout, self.stuck, done, restarted),
                                     {}, self.stuck, restarted)
        failures = dict(self.failures)
        for r, how in self.dead.items():
            failures[r] = errors.Failure(r, "RankDied", how, "")
        msg = errors.failure_message(label, cluster.world_size, failures, self.stuck, restarted)
        raise errors.RankError(msg, failures, self.stuck, restarted)


def _dump_stacks(ranks, which) -> dict:
    """Ask faulthandler in each rank for its stack (works inside C++ too); parse the dumps."""
    sizes = {r: ranks[r].stack_size() for r in which}
    for r in which:
        try:
            os.kill(ranks[r].pid, signal.SIGUSR1)
        except OSError:
            pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(ranks[r].stack_size() <= sizes[r] for r in which):
        time.sleep(0.01)
    time.sleep(0.02)                           # let a dump that has started finish
    return {r: errors.describe_stack(errors.parse_dump(ranks[r].read_stack(sizes[r]),
                                                        ranks[r].main_ident)) for r in which}


def _death(w, crash_offset: int) -> str:
    try:
        w.proc.wait(0.5)
    except Exception:
        pass
    how = w.how_it_died()
    frames = errors.parse_dump(w.read_stack(crash_offset), w.main_ident)
    if frames and w.proc.returncode is not None and w.proc.returncode < 0:
        how += "\n" + errors.describe_stack(frames)
    return how


def collect(cluster, task_id: int, timeout: float) -> Outcome:
    ranks = cluster._ranks
    out = Outcome(len(ranks))
    stack_sizes = {r: w.stack_size() for r, w in enumerate(ranks)}
    sel = selectors.DefaultSelector()
    for r, w in enumerate(ranks):
        sel.register(w.conn.fileno(), selectors.EVENT_READ, ("conn", r))
        sel.register(w.out_fd, selectors.EVENT_READ, ("out", r))
    deadline = time.monotonic() + timeout
    failed_at = None
    try:
        while out.pending:
            now = time.monotonic()
            if failed_at is not None and now - failed_at >= GRACE_S:
                break
            if now >= deadline:
                out.timed_out = True
                break
            limit = deadline if failed_at is None else min(deadline, failed_at + GRACE_S)
            for key, _ in sel.select(min(limit - now, 0.25)):
                what, r = key.data
                w = ranks[r]
                if what == "out":
                    cluster._print_lines(w, w.read_lines())
                    continue
                try:
                    while w.conn.poll():
                        msg = w.conn.recv()
                        if msg[1] != task_id:
                            continue                      # left over from an earlier task
                        if msg[0] == "event":
                            cluster._emit(_event(msg))
                        elif msg[0] == "result":
                            out.pending.discard(r)
                            if msg[2]:
                                out.results[r] = wire.loads(msg[3])
                            else:
                                out.failures[r] = errors.failure_from_report(r, msg[3])
                                failed_at = failed_at or time.monotonic()
                except (EOFError, OSError):
                    sel.unregister(w.conn.fileno())
                    cluster._print_lines(w, w.read_lines(final=True))
                    out.dead[r] = _death(w, stack_sizes[r])
                    out.pending.discard(r)
                    failed_at = failed_at or time.monotonic()
    finally:
        sel.close()
    for w in ranks:
        cluster._print_lines(w, w.read_lines(final=not out.pending))
    if out.pending:
        out.stuck = _dump_stacks(ranks, sorted(out.pending))
    if out.pending or out.dead:
        cluster._kill_ranks()
        cluster._pool.top_up()
    return out


def _event(msg) -> Event:
    _, _, rank, t, data = msg
    return Event(rank, t, data)
