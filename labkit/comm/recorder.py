"""Recorded runs: which chunk moved from which rank to which, at which step, and when.

    with labkit.comm.record() as rec:          # inside a rank
        labkit.comm.ring_all_reduce(t)
    rec.events                                  # one dict per step this rank took part in

Each event: phase ("reduce-scatter" / "all-gather" / "reduce" / "broadcast"), step,
rank, send_to, send_chunk, recv_from, recv_chunk, bytes sent and received, and t0/t1
(time.time() seconds: the step's start and the arrival of its last byte). The pictures in
`labkit.comm.plots` are drawn from these events, gathered from every rank.
"""
import time
from contextlib import contextmanager

_active = []           # the recordings open on this rank (nested blocks all receive events)


class Recording:
    def __init__(self):
        self.events = []

    def __repr__(self) -> str:
        return f"Recording({len(self.events)} events)"


def recording() -> bool:
    """True inside a `record()` block: collectives then pay for time stamps."""
    return bool(_active)


def note(**event) -> None:
    for rec in _active:
        rec.events.append(dict(event))


def now() -> float:
    return time.time()


@contextmanager
def record():
    rec = Recording()
    _active.append(rec)
    try:
        yield rec
    finally:
        _active.remove(rec)
