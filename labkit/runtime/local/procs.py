"""Worker processes: launching, the authenticated control socket, output pipes, killing.

Only this module and worker.py know about processes, ports, pipes and signals.

Every worker starts as a *spare* (torch imported, connected, no rank yet). A Cluster promotes
`world_size` spares to ranks; after a hang or a crash it kills its ranks and promotes the
next spares, which is why recovery costs a process-group init, not an `import torch`.
"""
import fcntl
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import labkit
from labkit.runtime import errors, frames, stacks
from labkit.runtime.local.control import ControlServer

_LABKIT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(labkit.__file__)))


def proc_state(pid) -> str:
    """The kernel's one-letter state of a process (R, S, D, T stopped, Z ...), '' if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


class Worker:
    """One worker process as the notebook sees it."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pid = proc.pid
        self.conn = None             # control Connection, once it said hello
        self.main_ident = None       # its main thread, to pick it out of a stack dump
        self.stack_path = None
        self.rank = None             # None while a spare
        self.out_fd = proc.stdout.fileno()
        os.set_blocking(self.out_fd, False)
        self._partial = b""
        self._inbox = frames.Inbox()  # messages from the rank, read without blocking
        self.eof = False             # the control connection closed
        self.garbled = None          # why a message could not be decoded, once one could not
        self.stopped_by = None       # why labkit stopped this process, if it did

    # -- messages -----------------------------------------------------------------------
    def read_messages(self) -> list:
        """The whole messages that have arrived, without ever blocking (see frames.Inbox);
        sets `eof` when the connection closed and `garbled` when a message cannot be decoded."""
        msgs = self._inbox.read(-1 if self.conn.closed else self.conn.fileno())   # closed: EOF
        self.eof, self.garbled = self._inbox.eof, self._inbox.garbled
        return msgs

    # -- output -------------------------------------------------------------------------
    def read_output(self) -> bytes:
        """Every byte the rank printed since the last call (never blocks)."""
        chunks = []
        while True:
            try:
                data = os.read(self.out_fd, 65536)
            except (BlockingIOError, OSError, ValueError):
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)

    def read_lines(self, final: bool = False) -> list:
        """Complete lines printed so far (all of it, partial last line too, if final)."""
        buf = self._partial + self.read_output()
        *lines, self._partial = buf.split(b"\n")
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    # -- life and death -----------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

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
        """The kernel's one-letter state of the process (R, S, D, T stopped, Z ...), '' if gone."""
        return proc_state(self.pid)

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
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.pid, signal.SIGKILL)       # children left after the worker died
        except OSError:
            pass
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

    def how_it_died(self) -> str:
        if self.stopped_by:
            return f"was stopped: {self.stopped_by}"
        return errors.how_it_ended(self.proc.poll(), "the rank's process")


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
    return found


class _Launcher:
    """Starts every worker from one long-lived thread. A worker asks the kernel to SIGKILL it
    when its parent dies (PR_SET_PDEATHSIG), and Linux sends that signal when the *thread*
    that started it ends, so workers must not be started from a short-lived thread."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._queue.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:          # noqa: B902 - handed to the caller
                box.append((False, exc))
            done.set()

    def __call__(self, fn):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="labkit-launcher")
                self._thread.start()
        box, done = [], threading.Event()
        self._queue.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_launcher = _Launcher()


def worker_env(threads: int, extra_env: dict = None) -> dict:
    """The environment of a worker (spawned, or forked from the zygote), with `extra_env` set
    before anything imports."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_LABKIT_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"                 # prints reach the notebook as they happen
    env["OMP_NUM_THREADS"] = str(threads)         # a fair share of the cores per rank
    env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    env.pop("MPLBACKEND", None)                   # the kernel's inline backend is not for ranks
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)                        # a torchrun parent must not leak into ranks
    env.update(extra_env or {})
    env["LABKIT_DRIVER_PID"] = str(os.getpid())   # the worker dies with this process
    return env


def launch(server: ControlServer, stack_dir: str, threads: int, extra_env: dict = None) -> Worker:
    """Start one spare worker: a fresh interpreter running labkit.runtime.worker, leading its
    own process group (killed as a group)."""
    host, port = server.address
    proc = _launcher(lambda: subprocess.Popen(
        [sys.executable, "-m", "labkit.runtime.worker", host, str(port), stack_dir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=worker_env(threads, extra_env), cwd=os.getcwd(), close_fds=True,
        start_new_session=True))
    proc.stdin.write(server.authkey.hex().encode() + b"\n")   # the key never shows in `ps`
    proc.stdin.flush()
    return Worker(proc)


def make_stack_dir() -> str:
    """A fresh folder for this process's stack dumps, named after the notebook's pid; folders
    of notebooks that no longer run (killed without cleaning up) are removed first."""
    remove_stale_dirs()
    return tempfile.mkdtemp(prefix=f"labkit-{os.getpid()}-")


def remove_stale_dirs(root: str = None, prefix: str = "labkit-") -> list:
    """Remove <prefix><pid>-* folders of this user whose process <pid> is gone (a notebook's
    stack folders, "labkit-"; a node agent's, "labkit-agent-"): what a SIGKILL left behind."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = re.fullmatch(re.escape(prefix) + r"(\d+)-\w+", name)
        path = os.path.join(root, name)
        if not m:
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
            continue                              # its notebook still runs
        except ProcessLookupError:
            pass
        except (PermissionError, OSError):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def fair_threads(world_size: int) -> int:
    """Cores available to this process divided among the ranks, at least one each."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // world_size)


def rendezvous_store(timeout: float):
    """The TCPStore ranks rendezvous through, on a loopback socket we bind (TCPStore's own
    port=0 would listen on every interface); returns (store, port). TCPStore takes the fd
    over and closes it when destroyed, so the Python socket object lets go of it (closing it
    twice closed a later socket). Returns (store, (host, port))."""
    import datetime
    import torch.distributed as dist
    sock = loopback_listen_socket()
    address = sock.getsockname()
    store = dist.TCPStore("127.0.0.1", address[1], None, True, timeout=datetime.timedelta(seconds=timeout),
                          wait_for_workers=False, master_listen_fd=sock.detach(), use_libuv=True)
    return store, address


def loopback_listen_socket() -> socket.socket:
    """A listening socket on 127.0.0.1 with an OS-chosen port, for the rendezvous store."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    flags = fcntl.fcntl(s.fileno(), fcntl.F_GETFD)
    fcntl.fcntl(s.fileno(), fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
    return s


__all__ = ["Worker", "ControlServer", "launch", "fair_threads", "loopback_listen_socket",
           "make_stack_dir", "remove_stale_dirs"]
