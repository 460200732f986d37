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

from labkit.i18n.messages import N_, tr
from labkit.runtime import errors, learner, portable, stacks
from labkit.runtime.control import ControlServer
from labkit.runtime.local import netns, procs
from labkit.runtime.local.handle import LocalRank
from labkit.runtime.local import userzygote, zygote


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
        if zygote.ENABLED and not self.env and userzygote.wanted():
            userzygote.prestart()                 # its torch import overlaps what follows
        threading.Thread(target=learner.snapshot, daemon=True).start()   # the first run's, early
        self.netns, self.netns_why = netns.make()     # the ranks' own loopback, or why not
        self.forking = 0                          # asked of the zygote, pid not known yet
        self.spawning = 0                         # being spawned, pid not listed yet
        self.forked = 0                           # workers the zygote made (spawned: the rest)
        self._early = {}                          # pid -> a hello that beat the zygote's answer
        self.zygote = None
        if zygote.ENABLED:
            try:
                if not self.env and userzygote.wanted():   # env=: read before torch imports
                    self.zygote = userzygote.connect(self.server, self.stack_dir, threads,
                                                     self._on_forked, self._on_zygote_lost,
                                                     self.netns)
                if self.zygote is None:
                    self.zygote = zygote.Zygote(self.server, self.stack_dir, threads, self.env,
                                                self._on_forked, self._on_zygote_lost, self.netns)
            except OSError as exc:
                print(f"labkit: could not start the process that forks ranks quickly ({exc}); "
                      "ranks start as fresh interpreters instead.", file=sys.stderr)
            except BaseException:                 # leave no server, thread or folder behind
                self.server.close()
                if self.netns is not None:
                    self.netns.close()
                shutil.rmtree(self.stack_dir, ignore_errors=True)
                raise
        if self.zygote is None:
            say_spawned_limits()

    def _reserve(self, n: int) -> int:
        """Count n workers as on their way (call with self.cond held); `launch` starts them
        after the lock is released. Returns n."""
        if n > 0:
            self.forking += n
        return max(n, 0)

    def launch(self, n: int) -> None:
        """Start n workers reserved with `_reserve` (never with self.cond held: a fork request
        to the zygote can wait for its socket, and the zygote's answers need self.cond to be
        read; issue 39). Forked by the zygote, else spawned."""
        for i in range(n):
            z = self.zygote
            if z is not None and z.alive and not self.closed:
                try:
                    z.fork()
                    continue
                except OSError:
                    pass                          # the zygote is gone or stopped: spawn the rest
            with self.cond:
                self.forking -= n - i
                closed = self.closed
            if not closed:
                self._spawn(n - i)
            return

    def _spawn(self, n: int) -> None:
        for _ in range(n):
            with self.cond:
                self.spawning += 1                # its hello may come before it is listed
            try:
                w = procs.launch(self.server, self.stack_dir, self.threads, self.env, self.netns)
            finally:
                with self.cond:
                    self.spawning -= 1
            with self.cond:
                self._adopt(w)

    def _adopt(self, w) -> None:
        """List a new worker (call with self.cond held): killed if the pool closed meanwhile;
        a hello that beat it here is attached now."""
        if self.closed:
            w.kill()
            return
        self.workers[w.pid] = w
        early = self._early.pop(w.pid, None)
        if early is not None:
            self._attach(w, *early)
        self.cond.notify_all()

    def check_zygote(self) -> None:
        """A stopped zygote forks nothing: notice it (zygote.check_stopped) and spawn instead."""
        if self.zygote is not None:
            self.zygote.check_stopped()

    def _on_forked(self, proc) -> None:
        """The zygote forked a worker (called from the zygote reader thread)."""
        w = LocalRank(proc)
        with self.cond:
            self.forking -= 1
            self.forked += 1
            self._adopt(w)

    def _on_zygote_lost(self, lost: int) -> None:
        """The zygote died; `lost` forks it never answered are spawned instead."""
        how = zygote_exit(self.zygote) if not self.closed else ""
        with self.cond:
            self.forking -= lost
            closed = self.closed
            self.cond.notify_all()
        if not closed:
            if not getattr(self.zygote, "stopped", False):
                print(tr("labkit: the process that forks ranks quickly has stopped ({how}); new "
                         "ranks start as fresh interpreters (2-10 s each).", how=how), file=sys.stderr)
            self._spawn(lost)

    def _on_hello(self, pid, conn, main_ident, stack_path) -> None:
        with self.cond:
            w = self.workers.get(pid)
            if w is None and (self.forking > 0 or self.spawning > 0) and not self.closed:
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
            if self.closed:
                return
            n = self._reserve(self.spare_target - len(self.spares) - len(self._starting())
                              - self.forking - self.spawning)
        self.launch(n)

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
            more = self._reserve(n - len(self.spares) - len(self._starting()) - self.forking
                                 - self.spawning)
        self.launch(more)
        with self.cond:
            while len(self.spares) < n:
                if self.forking:
                    self.check_zygote()
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


_said = []


def say_spawned_limits() -> None:
    """Once per notebook: what ranks started as fresh interpreters cannot do (no zygote: no
    child subreaper to end a rank's descendants in sessions of their own)."""
    if _said:
        return
    _said.append(True)
    why = portable.why_not("the zygote") if not portable.FORK_ZYGOTE else "LABKIT_ZYGOTE=0 is set"
    print(tr("labkit: ranks start as fresh interpreters here ({why}): a process that a rank "
             "starts in a session of its own (setsid, subprocess.Popen(start_new_session=True)) "
             "is not stopped with its rank or the cluster; end such processes yourself.", why=why),
          file=sys.stderr)


def zygote_exit(z) -> str:
    """How the zygote ended (its connection closing comes first: wait a moment for its exit)."""
    if z is None:
        return "closed its connection"
    try:
        code = z.proc.wait(1.0)
    except Exception:                             # noqa: BLE001 - still running after 1 s
        code = None
    if isinstance(z.proc, userzygote.Peer) and z.proc.poll() is not None:
        return tr("it has ended; another notebook of yours started it (its exit status went there)")
    if code is None or code < 0:
        return errors.how_it_ended(code, N_("the zygote"))
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
