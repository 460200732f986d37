"""The zygote: one small process that has imported torch and forks ready workers in ~0.1 s.

A spawned worker spends 2-10 s importing torch. The zygote does that once, runs no threaded
torch op, never touches CUDA and starts no thread, so forking it is safe (DESIGN.md: the rule
against forked workers is about forking the notebook, which has used torch's thread pool).
Each child becomes a worker exactly as a spawned one would (`worker.start`): its own session,
its own output pipe (created by the notebook, passed over a Unix socket), its own stack file,
its own connection to the control socket, torch threads set to the rank's share at init.

    notebook                          zygote                         child
    fork() -- "fork" + pipe fd -->    os.fork() ------------------>  worker.start(...)
           <-- Forked(pid) -------
           <-- Exited(pid, status)    (it reaps its children and reports how they ended)

(the records are in protocol.py.)

When the notebook dies the zygote kills its children and exits. If the zygote dies, the pool
falls back to spawning workers. LABKIT_ZYGOTE=0 in the environment turns the zygote off.
"""
import array
import collections
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from labkit.i18n.messages import tr
from labkit.runtime import frames, portable, protocol, stacks
from labkit.runtime.local import procs

ENABLED = os.environ.get("LABKIT_ZYGOTE", "1") != "0" and portable.FORK_ZYGOTE   # Linux: pidfd, prctl
UNKNOWN_EXIT = 255          # a child's status after its zygote died (no one left to ask)


STATUS_GRACE_S = 5.0     # how long a dead worker's exit status may take to come from the zygote


class ForkedProc:
    """A forked worker as the notebook sees it: the subset of subprocess.Popen that
    handle.LocalRank uses (pid, stdout, stdin, poll, wait, kill, returncode)."""

    def __init__(self, pid: int, out_fd: int, zygote: "Zygote"):
        self.pid = pid
        self.stdout = os.fdopen(out_fd, "rb", buffering=0)
        self.stdin = None
        self.returncode = None
        self._zygote = zygote
        self._ended = threading.Event()
        try:
            self._pidfd = os.pidfd_open(pid)      # signals reach this process, never a reused pid
        except (AttributeError, OSError):
            self._pidfd = None

    def _ended_with(self, status: int) -> None:
        self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self._ended.set()
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            try:
                os.close(self._pidfd)
            except OSError:
                pass
            self._pidfd = None

    def poll(self):
        if self.returncode is None and not self._zygote.alive and not self._exists():
            self.returncode = UNKNOWN_EXIT
            self._ended.set()
        return self.returncode

    def _exists(self) -> bool:
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except OSError:
            return True

    def _gone(self) -> bool:
        """Whether the process has exited (its pidfd is readable), though how it ended may still
        be on its way from the zygote."""
        fd = self._pidfd
        try:
            return fd is not None and frames.readable(fd)
        except (OSError, ValueError):
            return True                           # closed meanwhile: its status has come

    def wait(self, timeout: float = None):
        """Wait for the exit status. A process that has exited is waited for up to STATUS_GRACE_S
        longer than `timeout`: the zygote reaps it and reports how it ended, and under load
        (CI's parallel phase) that message once came after a wait of 0.5 s, so a rank killed
        by SIGKILL was described as "closed its connection but is still running"."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ended.wait(0.05) and self.poll() is None:
            if stacks.proc_state(self.pid) == "Z" and self._zygote.check_stopped():
                status = stacks.zombie_status(self.pid)   # read before init reaps it
                if status is not None:
                    self._ended_with(status)
                    break
            if deadline is not None and time.monotonic() > deadline:
                if time.monotonic() < deadline + STATUS_GRACE_S and self._gone():
                    continue
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        if self._ended.is_set():
            return
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass


class Zygote:
    """The notebook's side: start the zygote, ask it for workers, hear how they end."""

    shared = False                                # the learner's zygote (userzygote.py)?

    def _setup(self, on_forked, on_lost) -> None:
        self.alive = True
        self.ready_pid = None                     # set once torch is imported and forks can start
        self._on_forked, self._on_lost = on_forked, on_lost
        self._pending = collections.deque()       # pipe read ends of forks not answered yet
        self._procs = {}                          # pid -> ForkedProc
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()        # one fork request at a time, in order
        self.stopped = False                      # the kernel stopped it (pool.check_zygote)

    @classmethod
    def attach(cls, sock, proc, log_path: str, on_forked, on_lost, ready_pid=None) -> "Zygote":
        """The notebook's side of the learner's zygote (userzygote.connect): `sock` is connected
        and has said Hello; `proc` is our Popen if this notebook started it, else a Peer."""
        z = cls.__new__(cls)
        z._setup(on_forked, on_lost)
        z.shared, z.sock, z.proc, z.log_path, z.ready_pid = True, sock, proc, log_path, ready_pid
        z._reader = threading.Thread(target=z._read, daemon=True, name="labkit-zygote")
        z._reader.start()
        return z

    def __init__(self, server, stack_dir: str, threads: int, env: dict, on_forked, on_lost,
                 private=None):
        self._setup(on_forked, on_lost)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log_path = os.path.join(stack_dir, "zygote.log")
        zenv = procs.worker_env(threads, env)
        zenv.update(private.env() if private is not None else {})   # its forks: the ranks' network
        ns_fds = tuple(private.fds) if private is not None else ()
        with open(self.log_path, "wb") as log:     # started from the launcher thread: see procs
            self.proc = procs._launcher(lambda: subprocess.Popen(
                [sys.executable, "-m", "labkit.runtime.local.zygote_main", server.address, stack_dir,
                 str(theirs.fileno())],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                env=zenv, cwd=os.getcwd(), close_fds=True,
                pass_fds=(theirs.fileno(), *ns_fds)))
        theirs.close()
        self.proc.stdin.write(server.authkey.hex().encode() + b"\n")   # never in `ps`
        self.proc.stdin.close()
        self._reader = threading.Thread(target=self._read, daemon=True, name="labkit-zygote")
        self._reader.start()

    def fork(self) -> None:
        """Ask for one worker; `on_forked(ForkedProc)` follows from the reader thread. Never
        holds the lock the reader needs while it waits for the socket (a full socketpair drains
        only as the reader reads the zygote's answers); raises OSError once the zygote has
        stopped or is stopped by the kernel (SIGSTOP: nothing would ever drain)."""
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            with self._send_lock:                 # requests leave in the order of _pending
                with self._lock:
                    if not self.alive or self.stopped:
                        raise OSError("the zygote has stopped")
                    self._pending.append(r)
                while True:               # (socket.send_fds ignores its flags: sendmsg)
                    try:
                        self.sock.sendmsg([b"fork"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                       array.array("i", [w]))], socket.MSG_DONTWAIT)
                        break
                    except BlockingIOError:
                        if not self.alive or self.check_stopped():
                            raise OSError("the zygote is not answering") from None
                        writable = select.poll()      # not select.select: fds >= 1024
                        writable.register(self.sock, select.POLLOUT)
                        writable.poll(100)
        except OSError:
            with self._lock:
                if r in self._pending:
                    self._pending.remove(r)
            os.close(r)
            raise
        finally:
            os.close(w)

    def check_stopped(self) -> bool:
        """True if the kernel has stopped the zygote (SIGSTOP, a debugger, a frozen cgroup): it
        then forks nothing and reaps nothing (an exited rank stays a zombie). Said once; the
        zygote is ended (its ranks keep running) and the pool spawns instead (_on_lost)."""
        if self.stopped:
            return True
        if not self.alive or stacks.proc_state(self.proc.pid) not in ("T", "t"):
            return False
        self.stopped = True
        print(tr("labkit: the process that forks ranks quickly (pid {pid}) is stopped (SIGSTOP "
                 "or a debugger); it is ended and new ranks start as fresh interpreters "
                 "(2-10 s each).", pid=self.proc.pid), file=sys.stderr)
        try:
            self.proc.kill()                      # SIGKILL ends a stopped process too
        except OSError:
            pass
        return True

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                break
            msg = pickle.loads(data)
            if isinstance(msg, protocol.ZygoteReady):
                self.ready_pid = msg.pid
            elif isinstance(msg, protocol.Forked):
                with self._lock:
                    r = self._pending.popleft()
                    proc = ForkedProc(msg.pid, r, self)
                    self._procs[proc.pid] = proc
                self._on_forked(proc)
            elif isinstance(msg, protocol.Exited):
                with self._lock:
                    proc = self._procs.pop(msg.pid, None)
                if proc is not None:
                    proc._ended_with(msg.status)
        with self._lock:                          # the zygote is gone: what it owed us is lost
            self.alive = False
            lost = len(self._pending)
            while self._pending:
                os.close(self._pending.popleft())
        self._on_lost(lost)

    def close(self) -> None:
        """Stop the zygote: it kills any child still alive (EOF on its socket), then exits (the
        learner's zygote stays, for the next notebook)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.shared:
            self.sock.close()
            self._reader.join(1.0)
            self.proc.close()                     # (a Peer: its pidfd)
            return
        try:
            self.proc.wait(1.0)                   # (it has killed its ranks' descendants already)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:                                  # a killed process can take seconds to go on a
                self.proc.wait(10.0)              # loaded machine (8 clusters on 2 cores: > 1 s)
            except subprocess.TimeoutExpired:
                pass                              # killed; Popen reaps it later. close() never raises
        self.sock.close()
        self._reader.join(1.0)


# -- the zygote process ----------------------------------------------------------------------
