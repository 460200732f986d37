"""The remote ranks that have reached the notebook, waiting to be taken by the Cluster
(remote/source.RemoteRanks.take): each a handle.RemoteRank the hub thread (link.py) adds when
its node agent reports it; a rank is ready once it said hello. Taking waits (until the
deadline) for every rank torchrun numbered, and fails early, in words, when a node refused to
start or Slurm ended the job that held them.
"""
import sys
import threading
import time

from labkit.runtime import errors, protocol


class RemotePool:
    """The remote ranks that have reached the notebook, by their torchrun RANK."""

    def __init__(self, missing_message, never_message):
        self.missing_message = missing_message    # why ranks are missing, in words
        self.never_message = never_message        # why they will never come (Slurm ended the job)
        self.cond = threading.Condition()
        self.workers = {}                         # pid ("host:pid") -> RemoteRank
        self.spares = []
        self.refused = None                       # why a node cannot start (a rank said so)

    def add(self, w) -> None:                     # from the hub thread
        with self.cond:
            self.workers[w.pid] = w
            self.cond.notify_all()

    def forget(self, w) -> None:
        with self.cond:
            self.workers.pop(w.pid, None)

    def refuse(self, why: str) -> None:           # from the server's handshake thread
        with self.cond:
            self.refused = why
            self.cond.notify_all()

    def top_up(self) -> None:
        pass                                      # torchrun restarts ranks, not labkit

    def _ready(self) -> dict:
        """Live ranks that said hello, by rank (the newest one for each rank)."""
        found = {}
        for w in list(self.workers.values()):
            if w.ready is None and w.conn is not None and not w.eof:
                for msg in w.read_messages():
                    if isinstance(msg, protocol.Hello):
                        w.ready = msg.resources
            if not w.alive() or w.eof:
                self.workers.pop(w.pid, None)
                lines = w.read_lines(final=True)
                if lines and not w.stopped_by:
                    print(f"labkit: rank {w.info['rank']} on {w.where} ended before it was "
                          f"ready ({w.how_it_died()}):\n" + "\n".join(lines[-20:]), file=sys.stderr)
            elif w.ready is not None:
                found[int(w.info["rank"])] = w
        return found

    def take(self, n: int, deadline: float) -> list:
        said, t0 = False, time.monotonic()
        check_at = t0
        with self.cond:
            while True:
                if self.refused:
                    raise errors.StartError(f"a node cannot start: {self.refused}")
                ready = self._ready()
                bad = [w for w in ready.values() if int(w.info["world_size"]) != n]
                if bad:
                    raise errors.StartError(f"torchrun started {bad[0].info['world_size']} ranks, but "
                                       f"this cluster has {n} (nnodes x nproc_per_node): run the "
                                       "command the notebook printed")
                if all(r in ready for r in range(n)):
                    return [ready[r] for r in range(n)]
                missing = [r for r in range(n) if r not in ready]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.StartTimeout(self.missing_message(missing))
                if time.monotonic() >= check_at:  # Slurm ended their job: fail now, not at the deadline
                    check_at, never = time.monotonic() + 1.0, self.never_message()
                    if never:
                        raise errors.StartError(f"ranks {missing} will not reach the notebook: {never}")
                if not said and time.monotonic() - t0 > 3:
                    print(f"labkit: waiting for ranks {missing} (torchrun starts or restarts "
                          "them on their nodes) ...", file=sys.stderr)
                    said = True
                self.cond.wait(min(left, 0.05))

    def wait_for_spares(self, timeout: float = 60.0) -> bool:
        return True
