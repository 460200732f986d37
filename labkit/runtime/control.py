"""The control socket workers connect to, with its defences.

A local cluster's is a Unix socket in the cluster's 0700 folder (`path=`): no other user can
reach it (and a peer of another uid is refused: SO_PEERCRED), and it works across network
namespaces (the ranks have a private one: local/netns.py). A remote cluster's is a TCP port
(remote/tls.TLSServer). Only labkit workers know the key, but on TCP any local process can
connect (another user on a shared JupyterHub), so a connection that stalls, a flood of them, or
running out of file descriptors must never stop the notebook from accepting its own workers.
"""
import os
import secrets
import socket
import struct
import threading
import time
from multiprocessing.connection import answer_challenge, deliver_challenge

from labkit.runtime import frames, protocol


class ControlServer:
    """Loopback-only socket that workers connect to, authenticated with a random key.

    A thread accepts connections, checks the key (multiprocessing's HMAC challenge) and
    hands each hello to `on_hello(pid, conn, main_ident, stack_path)`. Any local process can
    connect, so the server defends itself: a connection that has not finished its handshake
    within `handshake_timeout` seconds is shut, at most `max_pending` handshakes run at once
    (the oldest is shut to make room), and the accept loop survives errors such as running
    out of file descriptors (EMFILE): it waits and accepts again until the server is closed.
    """

    def __init__(self, on_hello, host: str = "127.0.0.1", handshake_timeout: float = 10.0,
                 max_pending: int = 64, port: int = 0, path: str = None):
        self.authkey = secrets.token_bytes(32)
        if path is not None:                      # a local cluster: a Unix socket in its folder
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
            os.chmod(path, 0o600)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if port:                              # a port the user named (remote.py)
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((host, port))          # port 0: the OS picks a free one, clusters never collide
        self.sock.listen(64)
        self.sock.settimeout(0.25)                # wake up to shut expired handshakes
        self.address = self.sock.getsockname()
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.accept_errors = 0                    # errors the accept loop survived
        self._on_hello = on_hello
        self._closed = False
        self._lock = threading.Lock()
        self._pending = {}                        # socket -> deadline of its handshake
        self.thread = threading.Thread(target=self._accept_loop, daemon=True, name="labkit-accept")
        self.thread.start()

    def pending(self) -> int:
        """Connections whose handshake is still running."""
        with self._lock:
            return len(self._pending)

    def _shut_expired(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [s for s, t in self._pending.items() if t <= now]
        for s in late:
            _shut(s)

    def _make_room(self) -> None:
        """At most `max_pending` sockets held for handshakes: shut the oldest and wait for its
        thread to close it before accepting another (a flood then waits in the kernel's backlog of
        64, not in this process's descriptors). A thread starved for 5 s lets the loop go on."""
        deadline = time.monotonic() + 5.0
        while not self._closed:
            with self._lock:
                if len(self._pending) < self.max_pending:
                    return
                oldest = min(self._pending, key=self._pending.get)
            _shut(oldest)
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def _accept_loop(self) -> None:
        while not self._closed:
            self._shut_expired()
            self._make_room()
            try:
                s, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._closed:
                    return
                self.accept_errors += 1           # EMFILE, ENFILE, ENOBUFS, ECONNABORTED ...
                time.sleep(0.05)
                continue
            s.setblocking(True)
            if not _same_user(s):                 # a Unix peer of another uid: never a worker
                s.close()
                continue
            with self._lock:
                self._pending[s] = time.monotonic() + self.handshake_timeout
            try:
                threading.Thread(target=self._handshake, args=(s,), daemon=True,
                                 name="labkit-handshake").start()
            except RuntimeError:                  # cannot start a thread now
                self._done(s)

    def _done(self, s: socket.socket) -> None:
        with self._lock:
            self._pending.pop(s, None)
        s.close()

    def _handshake(self, s: socket.socket) -> None:
        try:
            conn = frames.accepted(s)            # no Nagle, one write per message
        except OSError:
            self._done(s)
            return
        try:
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            if not conn.poll(self.handshake_timeout):
                raise EOFError
            hello = conn.recv()
            assert isinstance(hello, protocol.Hello)
        except Exception:
            conn.close()                            # wrong key, too slow, or not a labkit worker
            self._done(s)
            return
        self._done(s)
        self._on_hello(hello.pid, conn, hello.main_ident, hello.stack_path)

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self._lock:
            pending = list(self._pending)
        for s in pending:
            _shut(s)


def _same_user(s: socket.socket) -> bool:
    """A Unix socket's peer runs as this user (SO_PEERCRED; without it, macOS, the folder's 0700
    mode alone keeps others out). TCP peers are judged by the key alone."""
    if s.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return True
    try:
        _, uid, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                     struct.calcsize("3i")))
    except OSError:
        return False
    return uid == os.geteuid()


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
