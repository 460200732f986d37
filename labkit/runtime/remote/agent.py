"""The node agent: one small process per torchrun, beside the ranks it started.

    python -m labkit.runtime.remote.agent --connect HOST:PORT --join FILE --torchrun PID
    (started by the first rank of a node that finds no agent: rank.py)

It holds the node's one connection to the notebook (TLS, authenticated with the cluster's
key) and, on a Unix socket that only processes of this user may use, one connection per rank
of the node. It forwards each rank's control bytes and output to the notebook (the output
first, so a rank's prints arrive before its result), and does for the notebook what needs
the node: SIGUSR1 for a stack dump (faulthandler, even inside C++), SIGKILL, and how a rank
died (its exit status: from /proc before torchrun reaps it, from its pidfd after). It outlives
torchrun's restarts of the ranks and leaves when torchrun exits or the notebook goes.

Exit codes: 0 another agent serves this torchrun; 2 the key file or the server was refused;
3 the notebook cannot be reached (the cluster was closed).
"""
import hashlib
import hmac
import os
import selectors
import signal
import socket
import sys
import time
from multiprocessing.connection import answer_challenge, deliver_challenge

from labkit.runtime import frames, protocol
from labkit.runtime.remote import tls
from labkit.runtime.remote.agent_ranks import RankSide, has_exited

BEAT_S = 1.0                     # a heartbeat to the notebook this often


TORCHRUN_GRACE_S = 10.0    # after the cluster closed, how long torchrun may take to end by itself


def socket_name(torchrun_pid: int, key: bytes) -> bytes:
    """The agent's Unix socket: abstract (nothing on disk), named after this user, the torchrun
    and the cluster's key. Any local user may bind any abstract name, so a name made of public
    facts alone (uid, pid) can be taken first; this one cannot be guessed without the key file.
    (It shows in /proc/net/unix while the agent runs: rank.py names a squatter if one took it.)"""
    tag = hmac.new(key, f"labkit-agent {torchrun_pid}".encode(), hashlib.sha256).hexdigest()[:32]
    return f"\0labkit-agent-{os.getuid()}-{torchrun_pid}-{tag}".encode()


def connect(address: str, join: dict, timeout: float = 10.0):
    """An authenticated connection to the notebook: TLS with the pinned certificate, then the
    key's challenge both ways. Returns the socket."""
    host, port = address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout)
    frames.nodelay(raw)                           # small control messages: no 40 ms waits
    if join["tls"]:
        s = tls.client_context(join["cert"]).wrap_socket(raw, server_hostname=join["name"])
        tls.check_pinned(s, join["cert"])
    elif tls.is_loopback(host):
        s = raw
    else:
        raw.close()
        raise tls.JoinFileError(f"this key file is for a cluster without TLS, which labkit only "
                                f"allows on loopback, not at {address}")
    ch, key = frames.Blocking(s), bytes.fromhex(join["key"])
    answer_challenge(ch, key)
    deliver_challenge(ch, key)
    s.settimeout(None)
    return s


class Agent(RankSide):
    def __init__(self, listener, link, torchrun: int, folder: str, address: str, join: dict):
        self.listener, self.link, self.folder = listener, link, folder
        self.address, self.join = address, join
        self.sel = selectors.DefaultSelector()
        self.ranks, self.slots = {}, 0
        self.stacks = []                          # (request, {slot: size}, deadline)
        self.sel.register(listener, selectors.EVENT_READ, ("accept", None))
        self.sel.register(link.fileno(), selectors.EVENT_READ, ("link", None))
        self.torchrun = os.pidfd_open(torchrun)
        self.sel.register(self.torchrun, selectors.EVENT_READ, ("torchrun", None))
        self.beat_at = 0.0

    # -- the notebook --------------------------------------------------------------------------
    def from_notebook(self) -> bool:
        for msg in self.link.read():
            if isinstance(msg, protocol.RankBytes) and msg.slot in self.ranks:
                r = self.ranks[msg.slot]
                r.to_rank += msg.data
                self.to_rank(r)
            elif isinstance(msg, protocol.Kill):
                self.signal(msg.slots, signal.SIGKILL)
            elif isinstance(msg, protocol.AskStacks):
                self.ask_stacks(msg.request, msg.slots)
            elif isinstance(msg, protocol.Close):
                return False
        return True                               # a closed link: the loop's cut_off decides

    def leave(self, why: str) -> None:
        """The cluster is closed (or the notebook gone): the ranks exit with code 0, so
        torchrun ends too instead of restarting them."""
        open(os.path.join(self.folder, "leave"), "w").close()
        for r in list(self.ranks.values()):
            r.sock.close()                        # the rank sees EOF, finds "leave": exits 0
        deadline = time.monotonic() + 3.0
        while self.ranks and time.monotonic() < deadline:
            for r in list(self.ranks.values()):
                if has_exited(r):
                    self.ranks.pop(r.slot)
            time.sleep(0.02)
        self.signal(list(self.ranks), signal.SIGKILL)
        self.end_torchrun()

    def end_torchrun(self, grace: float = TORCHRUN_GRACE_S) -> None:
        """torchrun ends by itself once its ranks exit 0; one whose ranks are gone already (a
        peer node died, so it waits in a new rendezvous that will never complete) would wait
        for good: after `grace` seconds it gets SIGTERM (it stops its workers and exits)."""
        import select
        p = select.poll()
        p.register(self.torchrun, select.POLLIN)  # a pidfd is readable once the process exits
        if p.poll(int(grace * 1000)):
            return
        try:
            signal.pidfd_send_signal(self.torchrun, signal.SIGTERM)
        except OSError:
            pass

    def cut_off(self) -> None:
        """The connection closed without "exit": the notebook died (leave), or it gave up on
        this node (silent too long) and still listens: then the ranks are killed, torchrun
        restarts them, and the first of them starts a new agent that connects again."""
        try:
            connect(self.address, self.join, timeout=5.0).close()
        except Exception:                         # noqa: BLE001 - unreachable, refused: gone
            return self.leave("the notebook is gone")
        self.signal(list(self.ranks), signal.SIGKILL)

    def loop(self) -> None:
        while True:
            now = time.monotonic()
            if now >= self.beat_at:
                self.link.send(protocol.Beat())
                self.beat_at = now + BEAT_S
            self.link.flush()
            if self.link.eof:
                return self.cut_off()
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.link.wants_write() else 0)
            self.sel.modify(self.link.fileno(), events, ("link", None))
            for key, mask in self.sel.select(0.01 if self.stacks else 0.25):
                what, r = key.data
                if what == "accept":
                    self.accept()
                elif what == "link" and mask & selectors.EVENT_READ and not self.from_notebook():
                    return self.leave("the cluster was closed")
                elif what == "torchrun":
                    self.link.send(protocol.Bye("its torchrun has exited"))
                    self.link.sock.setblocking(True)
                    self.link.flush()
                    return self.leave("torchrun exited")
                elif what == "rank" and r.slot in self.ranks:
                    if mask & selectors.EVENT_WRITE:
                        self.to_rank(r)
                    if mask & selectors.EVENT_READ:
                        self.from_rank(r)
                elif what == "out" and r.slot in self.ranks:
                    self.drain_output(r)
                elif what == "exit" and r.slot in self.ranks:
                    self.exited(r)
            self.answer_stacks()


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m labkit.runtime.remote.agent")
    p.add_argument("--connect", required=True)
    p.add_argument("--join", required=True)
    p.add_argument("--torchrun", type=int, required=True)
    a = p.parse_args(argv)
    try:
        join = tls.read_join_file(a.join)
    except tls.JoinFileError as exc:
        print(f"labkit agent: {exc}", file=sys.stderr, flush=True)
        return 2
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(socket_name(a.torchrun, bytes.fromhex(join["key"])))
    except OSError:
        return 0                                  # another agent serves this torchrun (or a squatter: rank.py says so)
    listener.listen(64)
    try:
        sock = connect(a.connect, join)
    except (tls.JoinFileError, ssl_errors()) as exc:
        print(f"labkit agent: {exc}", file=sys.stderr, flush=True)
        return 2
    except OSError as exc:
        print(f"labkit agent: the notebook at {a.connect} cannot be reached ({exc}); the cluster "
              "was closed or its address is wrong.", file=sys.stderr, flush=True)
        return 3
    link = frames.Link(sock)
    from labkit.runtime.stacks import remove_stale_dirs
    remove_stale_dirs(prefix="labkit-agent-")    # folders of agents that were SIGKILLed
    folder = tls.private_dir(f"labkit-agent-{os.getpid()}-")
    from labkit.runtime.remote.slurm import job_info
    link.send(protocol.AgentHello({"host": socket.gethostname(), "pid": os.getpid(),
                                   "torchrun": a.torchrun, **job_info(os.environ)}))
    try:
        Agent(listener, link, a.torchrun, folder, a.connect, join).loop()
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def ssl_errors():
    import ssl
    from multiprocessing import AuthenticationError
    return (ssl.SSLError, ssl.CertificateError, AuthenticationError, EOFError)


if __name__ == "__main__":
    sys.exit(main())
