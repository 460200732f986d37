"""A rank on another machine as the run loop sees it (`handle.RankHandle`).

Its control connection and output pipe are one end of a socketpair and of a pipe that the hub
(link.py) feeds from the node agent's link, so messages and output are read exactly as a local
rank's. Its process is reached only through that agent: killing it, asking where it is
(link.Hub.dump_stacks) and its exit status, which the agent reports (RankDied).
"""
import os
import threading

from labkit.runtime import errors, protocol
from labkit.runtime.handle import RankHandle


class RemoteProc:
    """The state of a rank's process on another machine, as its node's agent reports it."""

    def __init__(self, hub, link, slot: int):
        self.returncode = None
        self.lost = None                          # why its node was lost
        self.crash = ""                           # faulthandler's report of a crash, if any
        self._ended = threading.Event()
        self._hub, self._link, self._slot = hub, link, slot

    def ended(self, status=None, crash: str = "", lost: str = None) -> None:
        if status is None and lost is None:
            self.returncode = errors.UNKNOWN
        elif status is not None:
            self.returncode = -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
        self.lost, self.crash = lost, crash
        self._ended.set()

    def poll(self):
        if self.lost is not None and self.returncode is None:
            return errors.UNKNOWN
        return self.returncode

    def wait(self, timeout: float = None):
        self._ended.wait(timeout)
        return self.poll()

    def kill(self) -> None:
        if not self._ended.is_set():
            self._hub.command(self._link, protocol.Kill([self._slot]))


class RemoteRank(RankHandle):
    """A rank on another machine. `pid` is "host:pid" (a string, so that no local signal can
    ever be sent to it by mistake)."""

    def __init__(self, proc: RemoteProc, out_fd: int, conn, link, info: dict):
        super().__init__(f"{info['host']}:{info['pid']}", out_fd)
        self._out = os.fdopen(out_fd, "rb", buffering=0)   # closed by reap()
        self.proc, self.conn, self.link, self.info = proc, conn, link, info
        self.main_ident = info.get("main_ident")
        self.ready = None                         # its hello (gpus, threads), once received

    @property
    def where(self) -> str:
        return self.link.name

    def exit_code(self):
        return self.proc.poll()

    def how_it_died(self) -> str:
        """As any rank's; when its node ran in a Slurm job that Slurm ended (scancel, time
        limit, preemption, a failed node), that first, asked of Slurm (remote/slurm.py)."""
        job = self.link.info.get("slurm_job")
        if job and not self.stopped_by and self.exit_code() is not None:
            from labkit.runtime.remote import slurm
            ended = slurm.how_it_ended(job, slurm.SETTLE_S)
            if ended:
                return ended
        return super().how_it_died()

    def lost(self):
        return self.proc.lost

    def wait(self, timeout: float) -> None:
        self.proc.wait(timeout)

    def kill(self, why: str = None) -> None:
        if why and self.stopped_by is None:
            self.stopped_by = why
        self.proc.kill()

    def reap(self, timeout: float = 2.0) -> None:
        self.proc.wait(timeout)
        for f in (self.conn, self._out):
            try:
                f.close()
            except OSError:
                pass

    def stack_size(self) -> int:
        return 0

    def read_stack(self, since: int = 0) -> str:
        return self.proc.crash
