"""Remote ranks as the Cluster and `collect` see them, and the TLS server node agents reach.

A `RemoteWorker` is a procs.Worker whose process is on another machine: its control connection
and output pipe are fed by the hub (link.py); killing, stack dumps and how it died go
through its node's agent. `TLSServer` is the control server (control.py) with TLS and an
agent's hello instead of a worker's.
"""
import os
import socket
import threading
from multiprocessing.connection import answer_challenge, deliver_challenge

from labkit.runtime import frames, protocol
from labkit.runtime.local import procs
from labkit.runtime.local.control import ControlServer

UNKNOWN = "unknown"


class TLSServer(ControlServer):
    """The control server, with TLS and a node agent's hello (same defences: handshake
    deadline, a cap on pending handshakes, an accept loop that survives EMFILE)."""

    def __init__(self, on_agent, host: str, port: int, context):
        self.context = context
        super().__init__(on_agent, host=host, port=port)

    def _handshake(self, s: socket.socket) -> None:
        try:
            t = socket.socket(fileno=os.dup(s.fileno()))   # shutting `s` ends a stalled read
            frames.nodelay(t)                     # small control messages: no 40 ms waits
            t.settimeout(self.handshake_timeout)
            if self.context is not None:
                t = self.context.wrap_socket(t, server_side=True)
            ch = frames.Blocking(t)
            deliver_challenge(ch, self.authkey)
            answer_challenge(ch, self.authkey)
            hello = ch.recv()
            assert isinstance(hello, protocol.AgentHello)
        except Exception:                         # no TLS, wrong key, too slow, not an agent
            try:
                t.close()
            except Exception:
                pass
            self._done(s)
            return
        self._done(s)
        self._on_hello(t, hello.info)


class RemoteProc:
    """What procs.Worker needs of a process, for a rank on another machine."""

    def __init__(self, pid: str, out_fd: int, hub, link, slot: int):
        self.pid = pid
        self.stdout = os.fdopen(out_fd, "rb", buffering=0)
        self.stdin = None
        self.returncode = None
        self.lost = None                          # why its node was lost
        self.crash = ""
        self._ended = threading.Event()
        self._hub, self._link, self._slot = hub, link, slot

    def ended(self, status=None, crash: str = "", lost: str = None) -> None:
        if status is None and lost is None:
            self.returncode = UNKNOWN
        elif status is not None:
            self.returncode = -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
        self.lost, self.crash = lost, crash
        self._ended.set()

    def poll(self):
        if self.lost is not None and self.returncode is None:
            return UNKNOWN
        return self.returncode

    def wait(self, timeout: float = None):
        self._ended.wait(timeout)
        return self.poll()

    def kill(self) -> None:
        if not self._ended.is_set():
            self._hub.command(self._link, protocol.Kill([self._slot]))


class RemoteWorker(procs.Worker):
    """A rank on another machine. `pid` is "host:pid" (a string, so that no local signal can
    ever be sent to it by mistake); the process is reached through its node's agent."""

    def __init__(self, proc: RemoteProc, conn, link, info: dict):
        super().__init__(proc)
        self.conn, self.link, self.info = conn, link, info
        self.main_ident = info.get("main_ident")
        self.stack_path = None
        self.ready = None                         # its hello (gpus, threads), once received

    @property
    def where(self) -> str:
        return self.link.name

    def kill(self, why: str = None) -> None:
        if why and self.stopped_by is None:
            self.stopped_by = why
        self.proc.kill()

    def reap(self, timeout: float = 2.0) -> None:
        self.proc.wait(timeout)
        for f in (self.conn, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def state(self) -> str:
        return ""

    def stack_size(self) -> int:
        return 0

    def read_stack(self, since: int = 0) -> str:
        return self.proc.crash

    def how_it_died(self) -> str:
        if self.stopped_by:
            return f"was stopped: {self.stopped_by}"
        if self.proc.lost:
            return f"is gone: {self.proc.lost}"
        if self.proc.returncode == UNKNOWN:
            return "exited (torchrun collected its exit status before labkit could read it)"
        return super().how_it_died()
