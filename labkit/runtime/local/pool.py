"""The worker processes of one Cluster: spares that wait for a rank, and all the others.

A spare has imported torch and said hello on the control socket but has no rank yet.
`take(n)` hands spares to the Cluster (starting more if too few are on the way); `top_up()`
starts replacements in the background, so that recovering from a hang costs a process-group
init, not an `import torch`.

Workers are forked by the pool's zygote (zygote.py: ~0.1 s each, so the standby never runs
dry, even after several failures in a row); if the zygote cannot start or dies, they are
spawned as fresh interpreters instead (2-10 s each).
"""
import os
import shutil
import sys
import threading
import time

from labkit.runtime import errors, stacks
from labkit.runtime.control import ControlServer
from labkit.runtime.local import netns, procs
from labkit.runtime.local.handle import LocalRank
from labkit.runtime.local import zygote


class WorkerPool:
    def __init__(self, threads: int, spare_target: int, env: dict = None):
        self.threads = threads                    # torch threads per rank, set before import
        self.spare_target = spare_target
        self.cond = threading.Condition()
        self.workers = {}                         # pid -> LocalRank: every live process we started
        self.spares = []                          # said hello, no rank yet (oldest first)
        self.closed = False
        self.env = dict(env or {})               # extra environment of every worker
        self.stack_dir = stacks.make_stack_dir()
        self.server = ControlServer(self._on_hello, path=os.path.join(self.stack_dir, "control"))
        self.netns, self.netns_why = netns.make()     # the ranks' own loopback, or why not
        self.forking = 0                          # asked of the zygote, pid not known yet
        self.forked = 0                           # workers the zygote made (spawned: the rest)
        self._early = {}                          # pid -> a hello that beat the zygote's answer
        self.zygote = None
        if zygote.ENABLED:
            try:
                self.zygote = zygote.Zygote(self.server, self.stack_dir, threads, self.env,
                                            self._on_forked, self._on_zygote_lost, self.netns)
            except OSError as exc:
                print(f"labkit: could not start the process that forks ranks quickly ({exc}); "
                      "ranks start as fresh interpreters instead.", file=sys.stderr)

    def launch(self, n: int) -> None:
        """Start n workers (call with self.cond held): forked by the zygote, else spawned."""
        for _ in range(n):
            if self.zygote is not None and self.zygote.alive:
                try:
                    self.zygote.fork()
                    self.forking += 1
                    continue
                except OSError:
                    pass                          # the zygote is gone: spawn this one
            w = procs.launch(self.server, self.stack_dir, self.threads, self.env, self.netns)
            self.workers[w.pid] = w

    def _on_forked(self, proc) -> None:
        """The zygote forked a worker (called from the zygote reader thread)."""
        w = LocalRank(proc)
        with self.cond:
            self.forking -= 1
            self.forked += 1
            if self.closed:
                w.kill()
                return
            self.workers[w.pid] = w
            early = self._early.pop(w.pid, None)
            if early is not None:
                self._attach(w, *early)
            self.cond.notify_all()

    def _on_zygote_lost(self, lost: int) -> None:
        """The zygote died; `lost` forks it never answered are spawned instead."""
        how = zygote_exit(self.zygote) if not self.closed else ""
        with self.cond:
            self.forking -= lost
            if not self.closed:
                if lost:
                    self.launch(lost)
                print("labkit: the process that forks ranks quickly has stopped "
                      f"({how}); new ranks start as fresh interpreters "
                      "(2-10 s each).", file=sys.stderr)
            self.cond.notify_all()

    def _on_hello(self, pid, conn, main_ident, stack_path) -> None:
        with self.cond:
            w = self.workers.get(pid)
            if w is None and self.forking > 0 and not self.closed:
                self._early[pid] = (conn, main_ident, stack_path)   # the zygote's answer follows
                return
            if w is None or self.closed:
                conn.close()
                return
            self._attach(w, conn, main_ident, stack_path)

    def _attach(self, w, conn, main_ident, stack_path) -> None:
        w.conn, w.main_ident, w.stack_path = conn, main_ident, stack_path
        self.spares.append(w)
        self.cond.notify_all()

    def _starting(self) -> list:
        return [w for w in self.workers.values() if w.conn is None and w.alive()]

    def top_up(self) -> None:
        """Start spares up to the target (they import torch in the background)."""
        with self.cond:
            if not self.closed:
                missing = (self.spare_target - len(self.spares) - len(self._starting())
                           - self.forking)
                if missing > 0:
                    self.launch(missing)

    def wait_for_spares(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.spares) < self.spare_target and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.2))
        return True

    def take(self, n: int, deadline: float) -> list:
        """n spares, oldest first; starts what is missing and says why a start failed."""
        with self.cond:
            self.spares = [w for w in self.spares if w.alive()]
            missing = n - len(self.spares) - len(self._starting()) - self.forking
            if missing > 0:
                self.launch(missing)
            while len(self.spares) < n:
                for w in list(self.workers.values()):
                    if w.conn is None and not w.alive():
                        out = "\n".join(w.read_lines(final=True)[-30:])
                        del self.workers[w.pid]
                        raise errors.StartError(f"a rank's process could not start ({w.how_it_died()}). "
                                           f"Its output:\n{out}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.StartTimeout(f"ranks did not start within the start timeout "
                                       f"({len(self.spares)} of {n} ready)")
                self.cond.wait(min(left, 0.2))
            taken, self.spares = self.spares[:n], self.spares[n:]
            return taken

    def forget(self, w) -> None:
        self.workers.pop(w.pid, None)


def zygote_exit(z) -> str:
    """How the zygote ended (its connection closing comes first: wait a moment for its exit)."""
    if z is None:
        return "closed its connection"
    try:
        code = z.proc.wait(1.0)
    except Exception:                             # noqa: BLE001 - still running after 1 s
        code = None
    if code is None or code < 0:
        return errors.how_it_ended(code, "the zygote")
    try:
        with open(z.log_path, errors="replace") as f:
            tail = f.read()[-400:].strip()
    except OSError:
        tail = ""
    return f"exit code {code}" + (f": {tail}" if tail else "")


def shutdown(pool: WorkerPool) -> None:
    """Kill every process of the pool and free its sockets and files (also at exit): its
    folder holds the stack files and the rendezvous file."""
    with pool.cond:
        pool.closed = True
        pool.spares = []
        early, pool._early = list(pool._early.values()), {}
    for conn, _, _ in early:
        conn.close()
    workers = list(pool.workers.values())
    for w in workers:
        w.kill("the cluster was closed")
    for w in workers:
        w.reap(1.0)
    if pool.zygote is not None:
        pool.zygote.close()                       # it kills any child the pool never heard of
    pool.workers.clear()
    pool.server.close()
    if pool.netns is not None:
        pool.netns.close()                        # the namespace ends with its last process
    shutil.rmtree(pool.stack_dir, ignore_errors=True)
