"""A rank on this machine, as the run loop sees it (`handle.RankHandle`), and where local ranks
are when asked (SIGUSR1: faulthandler writes every thread's stack to the rank's stack file,
even while it waits inside a C++ collective)."""
import os
import signal
import subprocess
import time

from labkit.runtime import stacks
from labkit.runtime.handle import RankHandle
from labkit.runtime.local import watchdog


class LocalRank(RankHandle):
    """One worker process on this machine (a spare until it gets a rank)."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__(proc.pid, proc.stdout.fileno())
        self.proc = proc
        self.stack_path = None

    def exit_code(self):
        return self.proc.poll()

    def wait(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def stack_size(self) -> int:
        try:
            return os.path.getsize(self.stack_path)
        except (OSError, TypeError):
            return 0

    def read_stack(self, since: int = 0) -> str:
        try:
            with open(self.stack_path) as f:
                f.seek(since)
                return f.read()
        except (OSError, TypeError):
            return ""

    def state(self) -> str:
        return stacks.proc_state(self.pid)

    def kill(self, why: str = None) -> None:
        """SIGKILL the worker and every process it started (its own process group), so a
        rank that forked or started multiprocessing children leaves none behind."""
        if why and self.stopped_by is None:
            self.stopped_by = why
        if self.proc.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)   # the worker leads its own group
            except OSError:
                pass
            try:
                self.proc.kill()
            except OSError:
                pass

    def reap(self, timeout: float = 2.0) -> None:
        self.wait(timeout)
        try:
            os.killpg(self.pid, signal.SIGKILL)       # children left after the worker died
        except OSError:
            pass
        watchdog.forget(self.pid)
        for f in (self.conn, self.proc.stdout, self.proc.stdin):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        if self.stack_path:
            try:
                os.unlink(self.stack_path)
            except OSError:
                pass


def dump_stacks(ranks, which) -> dict:
    """Where each local rank in `which` is: faulthandler's dump of its main thread (works
    inside C++ too: SIGUSR1), innermost frame first; a string instead when the rank cannot
    answer. (Ranks on other machines are asked through their agents: remote/link.Hub.)"""
    found, asked, sizes = {}, [], {}
    for r in which:
        if ranks[r].state() in ("T", "t"):
            found[r] = (f"stopped (SIGSTOP or a debugger: process {ranks[r].pid} cannot run until "
                        "it gets SIGCONT)")
            continue
        sizes[r] = ranks[r].stack_size()
        try:
            os.kill(ranks[r].pid, signal.SIGUSR1)
            asked.append(r)
        except OSError:
            found[r] = "gone (its process has exited)"
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(ranks[r].stack_size() <= sizes[r] for r in asked):
        time.sleep(0.01)
    time.sleep(0.02)                           # let a dump that has started finish
    for r in asked:
        if ranks[r].stack_size() <= sizes[r]:
            found[r] = ("did not answer when asked where it was (busy inside C code that holds "
                        "Python's lock, or stopped)")
        else:
            found[r] = stacks.parse_dump(ranks[r].read_stack(sizes[r]), ranks[r].main_ident)
        ranks[r].stack_read = ranks[r].stack_size()   # a crash dump, later, comes after this
    return found
