"""Reading a rank's messages without ever blocking.

multiprocessing's Connection.recv blocks until a whole message is in, with no deadline, so a
rank that sent half a message (or garbage: two threads writing at once) would hang the
notebook for good. `Inbox` reads only the bytes that have arrived, frames them as
multiprocessing frames them (a 4-byte big-endian length, or -1 and an 8-byte length) and
unpickles each whole message. A message that cannot be decoded sets `garbled`: that rank has
failed. A closed connection sets `eof`.

`Conn` is the sending side of the same framing: a multiprocessing Connection that writes each
message with one system call, on a socket with Nagle's algorithm off (`nodelay`). Two small
writes in a row on a TCP connection otherwise wait for the peer's delayed acknowledgement
(40 ms on Linux): that made a trivial `cluster.run` take 44 ms instead of about 1.

A node agent's TLS link uses the same frames (`Link`, and `Blocking` for its handshake).
"""
import os
import pickle
import select
import socket
import ssl
import struct
import threading
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

MAX_MESSAGE = 1 << 40          # a header announcing more than this is garbage, not a message


def frame(data) -> bytes:
    """`data` with its header, as multiprocessing's Connection frames it."""
    n = len(data)
    return (struct.pack("!i", n) if n <= 0x7fffffff else struct.pack("!iQ", -1, n)) + bytes(data)


class Inbox:
    def __init__(self):
        self._buf = bytearray()
        self.eof = False
        self.garbled = None        # why a message could not be decoded, once one could not
        self._poller, self._polled = None, None

    def feed(self, data: bytes) -> list:
        """Bytes that arrived some other way (a TLS socket); returns the whole messages."""
        self._buf += data
        return self._messages()

    def read(self, fd: int, limit: int = 64 << 20) -> list:
        """Read what has arrived on `fd` (at most `limit` bytes), return the whole messages."""
        got, size = 0, 1 << 16
        while got < limit and not self.eof:
            try:
                if not self._ready(fd):
                    break
                data = os.read(fd, size)   # 64 KiB first: a read of 1 MiB costs 16 us, of 64 KiB 1
                size = min(size * 4, 1 << 20) if len(data) == size else size
            except (OSError, ValueError):
                data = b""
            if not data:
                self.eof = True
                break
            self._buf += data
            got += len(data)
        return self._messages()

    def _ready(self, fd: int) -> bool:
        """`readable(fd)` with one poll object for the connection's life (a trivial run reads
        each rank's connection a few times)."""
        if self._polled != fd:
            self._poller, self._polled = select.poll(), None
            self._poller.register(fd, select.POLLIN)   # ValueError for a closed one (-1)
            self._polled = fd
        return bool(self._poller.poll(0))

    def _messages(self, raw: bool = False) -> list:
        msgs, buf = [], self._buf
        while self.garbled is None and len(buf) >= 4:
            n, = struct.unpack("!i", buf[:4])
            head = 4
            if n == -1:
                if len(buf) < 12:
                    break
                n, = struct.unpack("!Q", buf[4:12])
                head = 12
            if n < 0 or n > MAX_MESSAGE:
                self.garbled = f"a message header announced {n} bytes"
                break
            if len(buf) < head + n:
                break
            try:
                body = bytes(buf[head:head + n])
                msgs.append(body if raw else pickle.loads(body))
            except Exception as exc:          # noqa: BLE001 - any decoding error
                self.garbled = f"{type(exc).__name__}: {exc}"
            del buf[:head + n]
        return msgs


def readable(fd: int, timeout: float = 0.0) -> bool:
    """Whether `fd` has something to read (or is closed), waiting at most `timeout` seconds.
    poll, not select: select fails on descriptors >= 1024 (a notebook with many files open)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(None if timeout is None else max(0, int(timeout * 1000))))


def nodelay(sock) -> None:
    """Turn Nagle's algorithm off on a TCP socket (or a descriptor of one); a no-op otherwise."""
    if isinstance(sock, int):
        s = socket.socket(fileno=os.dup(sock))
        try:
            nodelay(s)
        finally:
            s.close()
        return
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class Conn(Connection):
    """multiprocessing's Connection, sending header and body in one write (writev)."""

    def _send_bytes(self, buf) -> None:
        buf = memoryview(buf).cast("B")
        n = len(buf)
        header = struct.pack("!i", n) if n <= 0x7fffffff else struct.pack("!iQ", -1, n)
        parts = [header, buf]
        while parts:
            sent = os.writev(self._handle, parts)
            while parts and sent >= len(parts[0]):
                sent -= len(parts[0])
                parts.pop(0)
            if parts and sent:
                parts[0] = memoryview(parts[0])[sent:]


def connect(address, authkey: bytes) -> Conn:
    """A worker's control connection to the notebook: a Unix socket (`address` a path: a local
    cluster's) or TCP without Nagle, the key checked both ways (as
    multiprocessing.connection.Client does)."""
    if isinstance(address, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(address)
        except OSError:
            s.close()
            raise
    else:
        s = socket.create_connection(address)
        nodelay(s)
    conn = Conn(s.detach())
    answer_challenge(conn, authkey)
    deliver_challenge(conn, authkey)
    return conn


def accepted(sock) -> Conn:
    """The notebook's end of an accepted control socket (a duplicate descriptor: shutting `sock`
    down still ends a stalled read on it)."""
    nodelay(sock)
    return Conn(os.dup(sock.fileno()))


# -- the same frames over a TLS socket (a node agent's link) ------------------------------------
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


class Blocking:
    """Whole frames over a blocking (TLS) socket, for the handshake: the methods that
    multiprocessing's deliver_challenge/answer_challenge use, plus send/recv of objects."""

    def __init__(self, sock):
        self.sock = sock
        self._inbox = Inbox()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(frame(data))

    def recv_bytes(self, maxlength: int = None) -> bytes:
        while True:
            got = self._inbox._messages(raw=True)
            if self._inbox.garbled:
                raise EOFError(f"a garbled frame ({self._inbox.garbled})")
            if got:
                if maxlength is not None and len(got[0]) > maxlength:
                    raise EOFError("message too long")
                return got[0]                     # one frame at a time in a handshake
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("the connection closed")
            self._inbox._buf += data

    def send(self, obj) -> None:
        self.send_bytes(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    def recv(self, maxlength: int = 1 << 20):
        return pickle.loads(self.recv_bytes(maxlength))


class Link:
    """An authenticated connection (TLS, or plain on loopback) used from one event loop:
    `send` from any thread queues a message; `flush` and `read` never block. A frame that
    cannot be decoded ends the link (`eof`, with the reason in `garbled`)."""

    def __init__(self, sock):
        self.sock = sock
        sock.setblocking(False)
        self.eof = False
        self._inbox = Inbox()
        self._out, self._chunk = bytearray(), None
        self._lock = threading.Lock()

    @property
    def garbled(self):
        return self._inbox.garbled

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg) -> None:
        data = frame(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL))
        with self._lock:
            self._out += data

    def wants_write(self) -> bool:
        return bool(self._out or self._chunk)

    def flush(self) -> None:
        """Write what the socket takes now (a chunk that would block is retried unchanged)."""
        while not self.eof:
            with self._lock:
                if self._chunk is None:
                    if not self._out:
                        return
                    self._chunk = bytes(self._out[:1 << 20])
                    del self._out[:len(self._chunk)]
            try:
                n = self.sock.send(self._chunk)
            except _WOULD_BLOCK:
                return
            except OSError:
                self.eof = True
                return
            self._chunk = self._chunk[n:] or None

    def read(self) -> list:
        """The whole messages that have arrived; sets `eof` when the peer has gone."""
        msgs = []
        while not self.eof:
            try:
                data = self.sock.recv(1 << 20)
            except _WOULD_BLOCK:
                break
            except OSError:
                data = b""
            if not data:
                self.eof = True
                break
            msgs += self._inbox.feed(data)
        if self._inbox.garbled:
            self.eof = True
        return msgs

    def close(self) -> None:
        self.eof = True
        try:
            self.sock.close()
        except OSError:
            pass
