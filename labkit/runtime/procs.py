"""Worker processes: launching, the authenticated control socket, output pipes, killing.

Only this module and worker.py know about processes, ports, pipes and signals.

Every worker starts as a *spare* (torch imported, connected, no rank yet). A Cluster promotes
`world_size` spares to ranks; after a hang or a crash it kills its ranks and promotes the
next spares, which is why recovery costs a process-group init, not an `import torch`.
"""
import fcntl
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

import labkit

_LABKIT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(labkit.__file__)))


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

    # -- output -------------------------------------------------------------------------
    def read_lines(self, final: bool = False) -> list:
        """Complete lines printed so far (all of it, partial last line too, if final)."""
        chunks = []
        while True:
            try:
                data = os.read(self.out_fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        buf = self._partial + b"".join(chunks)
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

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass

    def reap(self, timeout: float = 2.0) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
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
        code = self.proc.poll()
        if code is None:
            return "closed its connection but is still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = {"SIGKILL": "killed (SIGKILL: out of memory, or killed from outside)",
                   "SIGSEGV": "crashed with a segmentation fault (SIGSEGV)",
                   "SIGABRT": "aborted (SIGABRT: a C++ assertion or abort())",
                   "SIGBUS": "crashed with a bus error (SIGBUS)",
                   "SIGFPE": "crashed with a floating-point exception (SIGFPE)",
                   "SIGTERM": "terminated (SIGTERM)"}.get(name, f"killed by {name}")
            return f"died: {why}"
        return f"exited with code {code} (os._exit or a C-level exit; the rank's process is gone)"


class ControlServer:
    """Loopback-only socket that workers connect to, authenticated with a random key.

    A thread accepts connections, checks the key (multiprocessing's HMAC challenge) and
    hands each hello to `on_hello(pid, conn, main_ident, stack_path)`.
    """

    def __init__(self, on_hello, host: str = "127.0.0.1"):
        self.authkey = secrets.token_bytes(32)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((host, 0))                 # the OS picks a free port: clusters never collide
        self.sock.listen(64)
        self.address = self.sock.getsockname()
        self._on_hello = on_hello
        self._closed = False
        self.thread = threading.Thread(target=self._accept_loop, daemon=True, name="labkit-accept")
        self.thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return                              # closed
            threading.Thread(target=self._handshake, args=(s,), daemon=True).start()

    def _handshake(self, s: socket.socket) -> None:
        conn = Connection(s.detach())
        try:
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            if not conn.poll(30):
                raise EOFError
            kind, pid, main_ident, stack_path = conn.recv()
            assert kind == "hello"
        except Exception:
            conn.close()                            # wrong key or not a labkit worker
            return
        self._on_hello(pid, conn, main_ident, stack_path)

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def worker_env(threads: int) -> dict:
    """The environment of a worker (spawned, or forked from the zygote)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_LABKIT_ROOT, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"                 # prints reach the notebook as they happen
    env["OMP_NUM_THREADS"] = str(threads)         # a fair share of the cores per rank
    env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    env.pop("MPLBACKEND", None)                   # the kernel's inline backend is not for ranks
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)                        # a torchrun parent must not leak into ranks
    return env


def launch(server: ControlServer, stack_dir: str, threads: int) -> Worker:
    """Start one spare worker: a fresh interpreter running labkit.runtime.worker."""
    host, port = server.address
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit.runtime.worker", host, str(port), stack_dir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=worker_env(threads), cwd=os.getcwd(), close_fds=True)
    proc.stdin.write(server.authkey.hex().encode() + b"\n")   # the key never shows in `ps`
    proc.stdin.flush()
    return Worker(proc)


def fair_threads(world_size: int) -> int:
    """Cores available to this process divided among the ranks, at least one each."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // world_size)


def loopback_listen_socket() -> socket.socket:
    """A listening socket on 127.0.0.1 with an OS-chosen port, for the rendezvous store."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    flags = fcntl.fcntl(s.fileno(), fcntl.F_GETFD)
    fcntl.fcntl(s.fileno(), fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
    return s


__all__ = ["Worker", "ControlServer", "launch", "fair_threads", "loopback_listen_socket"]
