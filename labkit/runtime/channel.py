"""A rank's end of its control connection to the notebook (the rank side: worker.py, and
remote/rank.py under torchrun).

`Channel` is the only way a rank writes to the notebook: results (their tensors through shared
memory, held until the notebook has loaded them), `labkit.emit` events (capped per task),
init replies. context.py, what a learner's code asks (`rank()`, `emit()`), sends through it.
"""
import os
import pickle
import threading

from labkit.runtime import protocol, shm, wire

EVENT_LIMITS = (10_000, 10_000_000)   # events, pickled bytes per rank per run: Cluster's defaults


class Channel:
    """A rank's control connection to the notebook, safe to send on from many threads.

    multiprocessing's Connection writes a message in several system calls (header, then body),
    so two threads sending at once interleave bytes and the notebook cannot decode either
    message. Every send of a rank (results, events, init replies) goes through one lock.
    A process forked from the rank (os.fork, a multiprocessing child) must never write here:
    its sends are dropped, so it can neither garble the stream nor answer for the rank."""

    def __init__(self, conn):
        self.conn = conn
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self.task_id = None          # the task running now, for events
        self._events = None          # [count, bytes, dropped, limits] of the running task
        self._sent = []              # the last result's shared-memory segments, until loaded
        self._sent_lock = threading.Lock()

    def send(self, msg) -> None:
        if os.getpid() != self.pid:
            return
        with self._lock:
            self.conn.send(msg)

    # -- one task -----------------------------------------------------------------------------
    def new_task(self, task_id, limits=None) -> None:
        """A task starts (None: it ended); its events are counted from zero."""
        self.task_id = task_id
        self._events = [0, 0, 0, tuple(limits or EVENT_LIMITS)]

    def events_dropped(self) -> int:
        return self._events[2] if self._events else 0

    def send_event(self, rank: int, time: float, fields: dict) -> None:
        """A `labkit.emit` of the running task, unless it already sent as many events or bytes
        as it may: then it is counted as dropped (the notebook says how many), and the
        notebook's memory stays bounded however fast a rank emits. Each field is pickled on
        its own: a value the notebook cannot unpickle (a class only the ranks can import) loses
        that event, named, not the whole connection (collect.py)."""
        ev = self._events
        if ev is None or self.task_id is None or os.getpid() != self.pid:
            return
        if ev[0] >= ev[3][0]:
            ev[2] += 1
            return
        data = {k: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) for k, v in fields.items()}
        msg = pickle.dumps(protocol.Event(self.task_id, rank, time, data), protocol=pickle.HIGHEST_PROTOCOL)
        if ev[1] + len(msg) > ev[3][1]:
            ev[2] += 1
            return
        ev[0] += 1
        ev[1] += len(msg)
        with self._lock:
            self.conn.send_bytes(msg)

    def dumps_result(self, value) -> bytes:
        """A result pickled, its tensors through shared memory the notebook maps; the segment is
        held until `release_results`."""
        with self._sent_lock:
            return wire.dumps(value, keep=self._sent, private=False)

    def release_results(self) -> None:
        """The notebook has loaded the last result (protocol.Release, or the next task came):
        let go of its segments."""
        with self._sent_lock:
            shm.close(self._sent)

    # -- reading (the worker's main thread, between tasks; its second thread polls the fileno) ----
    def recv(self):
        return self.conn.recv()

    def fileno(self) -> int:
        return self.conn.fileno()
