"""The notebook's side of remote nodes: one thread for every node link (the hub), feeding
remote ranks (handle.py) that look to the Cluster and `collect` like local workers.

Each node agent holds one TLS connection (agent.py). A single hub thread reads them all and
gives every remote rank what a local worker has: a control connection (one end of a
socketpair, the hub writes the rank's bytes into the other end) and an output pipe. So
`collect` waits on remote ranks exactly as on local ones; only killing, stack dumps and how a
rank died go through its node's agent. A node whose agent closes its connection, or sends no
heartbeat for `heartbeat_timeout` seconds, is reported by name and its ranks as lost.
"""
import itertools
import os
import selectors
import socket
import threading
import time

from labkit.runtime import frames, protocol, stacks
from labkit.runtime.remote.handle import RemoteProc, RemoteRank


class NodeLink:
    def __init__(self, hub, sock, info: dict):
        self.hub, self.info = hub, info
        self.link = frames.Link(sock)
        self.workers = {}                         # slot -> RemoteRank
        self.pipes = {}                           # slot -> [sock end, out fd, pending data, pending out, closing]
        self.group_rank = None
        self.last_seen = time.monotonic()
        self.gone = None

    @property
    def name(self) -> str:
        n = "?" if self.group_rank is None else self.group_rank
        job = f", Slurm job {self.info['slurm_job']}" if self.info.get("slurm_job") else ""
        return f"node {n} (host {self.info['host']}{job})"


class Hub:
    """One thread that serves every node link of a remote cluster."""

    def __init__(self, on_rank, heartbeat_timeout: float):
        self.on_rank = on_rank
        self.heartbeat_timeout = heartbeat_timeout
        self.links, self.lost = [], []            # node links now, and those lost
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Condition()
        self._new, self._replies, self._ids = [], {}, itertools.count(1)
        self.closed = 0.0                         # once closing: when to stop at the latest
        self.thread = threading.Thread(target=self._loop, daemon=True, name="labkit-nodes")
        self.thread.start()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def add(self, sock, info: dict) -> None:      # from the server's handshake thread
        with self._lock:
            self._new.append(NodeLink(self, sock, info))
        self._wake()

    def command(self, link: NodeLink, msg) -> None:
        link.link.send(msg)
        self._wake()

    def dump_stacks(self, ranks, which) -> dict:
        """Where each rank in `which` is, from its agent's faulthandler dump (as collect's)."""
        found, asked = {}, {}
        for r in which:
            w = ranks[r]
            if w.link.gone:
                found[r] = f"gone ({w.link.gone})"
                continue
            asked.setdefault(w.link, {})[w.proc._slot] = r
        ids = {}
        for link, slots in asked.items():
            i = next(self._ids)
            ids[i] = link
            self.command(link, protocol.AskStacks(i, list(slots)))
        deadline = time.monotonic() + 3.0
        with self._lock:
            while any(i not in self._replies for i in ids) and time.monotonic() < deadline:
                self._lock.wait(0.05)
            replies = {i: self._replies.pop(i, {}) for i in ids}
        for i, link in ids.items():
            for slot, r in asked[link].items():
                kind, text = replies[i].get(slot, ("silent", ""))
                if kind == "dump":
                    found[r] = stacks.parse_dump(text, ranks[r].main_ident)
                elif kind == "stopped":
                    found[r] = f"stopped (SIGSTOP or a debugger: process {ranks[r].pid})"
                elif kind == "gone":
                    found[r] = "gone (its process has exited)"
                else:
                    found[r] = ("did not answer when asked where it was (busy inside C code that "
                                f"holds Python's lock, stopped, or {link.name} is unreachable)")
        return found

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while not (self.closed and (time.monotonic() > self.closed or
                                    not any(n.link.wants_write() for n in self.links))):
            try:
                self._step()
            except Exception as exc:              # noqa: BLE001 - the loop must keep serving
                import sys
                import traceback
                print(f"labkit: error in the thread that serves remote nodes ({exc!r}); it goes "
                      "on:\n" + traceback.format_exc(limit=3), file=sys.stderr)
                time.sleep(0.1)

    def _step(self) -> None:
        with self._lock:
            new, self._new = self._new, []
        for n in new:
            self.links.append(n)
            self.sel.register(n.link.fileno(), selectors.EVENT_READ, ("link", n, None))
        now = time.monotonic()
        for n in list(self.links):
            n.link.flush()
            if n.link.eof:
                self._lost(n, n.gone or "its labkit agent closed the connection (killed, "
                                         "or its torchrun stopped)")
            elif now - n.last_seen > self.heartbeat_timeout:
                self._lost(n, f"no word from its labkit agent for {self.heartbeat_timeout:g} s "
                              "(the machine, its network or the agent is down)")
            else:
                ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if n.link.wants_write() else 0)
                self.sel.modify(n.link.fileno(), ev, ("link", n, None))
        for key, mask in self.sel.select(0.2):
            if key.data is None:
                try:
                    os.read(self._wake_r, 4096)
                except OSError:
                    pass
                continue
            what, n, slot = key.data
            if what == "link" and mask & selectors.EVENT_READ:
                self._from_agent(n)
            elif what == "pair" and slot in n.pipes:
                self._pair(n, slot, mask)
            elif what == "out" and slot in n.pipes:
                self._push(n, slot)

    def _from_agent(self, n: NodeLink) -> None:
        n.last_seen = time.monotonic()
        for msg in n.link.read():
            if isinstance(msg, protocol.RankUp):
                self._new_rank(n, msg.slot, msg.info)
            elif isinstance(msg, (protocol.RankBytes, protocol.RankOutput)) and msg.slot in n.pipes:
                n.pipes[msg.slot][2 if isinstance(msg, protocol.RankBytes) else 3] += msg.data
                self._push(n, msg.slot)
            elif isinstance(msg, protocol.RankDied) and msg.slot in n.workers:
                n.workers[msg.slot].proc.ended(msg.status, msg.crash)
                n.pipes[msg.slot][4] = True
                self._push(n, msg.slot)
            elif isinstance(msg, protocol.Stacks):
                with self._lock:
                    self._replies[msg.request] = msg.answers
                    self._lock.notify_all()
            elif isinstance(msg, protocol.Bye):
                n.gone = msg.why

    def _new_rank(self, n: NodeLink, slot: int, info: dict) -> None:
        a, b = socket.socketpair()
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        b.setblocking(False)
        os.set_blocking(out_w, False)
        w = RemoteRank(RemoteProc(self, n, slot), out_r, frames.Conn(a.detach()), n, info)
        if info.get("group_rank") is not None:
            n.group_rank = int(info["group_rank"])
        n.workers[slot] = w
        n.pipes[slot] = [b, out_w, bytearray(), bytearray(), False]
        self.sel.register(b, selectors.EVENT_READ, ("pair", n, slot))
        self.on_rank(w)

    def _pair(self, n: NodeLink, slot: int, mask) -> None:
        b = n.pipes[slot][0]
        if mask & selectors.EVENT_READ:           # the notebook sent the rank something
            try:
                data = b.recv(1 << 20)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if data:
                n.link.send(protocol.RankBytes(slot, data))
        self._push(n, slot)

    def _push(self, n: NodeLink, slot: int) -> None:
        """Move what arrived for a rank into its socketpair and pipe without blocking; once
        it has died and all is delivered, close them (the notebook sees EOF)."""
        b, out_w, data, out, closing = n.pipes[slot]
        try:
            if data:
                del data[:b.send(data)]
            if out:
                del out[:os.write(out_w, out)]
        except BlockingIOError:
            pass
        except OSError:
            data.clear()
            out.clear()
        if closing and not data and not out:
            self.sel.unregister(b)
            try:
                self.sel.unregister(out_w)
            except (KeyError, ValueError):
                pass
            b.close()
            os.close(out_w)
            del n.pipes[slot]
            return
        self.sel.modify(b, selectors.EVENT_READ | (selectors.EVENT_WRITE if data else 0),
                        ("pair", n, slot))
        registered = out_w in self.sel.get_map()
        if out and not registered:
            self.sel.register(out_w, selectors.EVENT_WRITE, ("out", n, slot))
        elif not out and registered:
            self.sel.unregister(out_w)

    def _lost(self, n: NodeLink, why: str) -> None:
        n.gone = why
        self.links.remove(n)
        self.lost.append(n)
        try:
            self.sel.unregister(n.link.fileno())
        except (KeyError, ValueError):
            pass
        n.link.close()
        for slot, w in list(n.workers.items()):
            if not w.proc._ended.is_set():
                w.proc.ended(lost=f"{n.name} was lost: {why}")
            if slot in n.pipes:
                n.pipes[slot][4] = True
                self._push(n, slot)

    def close(self) -> None:
        """Tell every agent the cluster is closed (its ranks exit 0, so torchrun ends)."""
        for n in list(self.links):
            n.link.send(protocol.Close())
        self.closed = time.monotonic() + 2.0      # the loop delivers that, then stops
        self._wake()
        self.thread.join(3.0)
        for n in list(self.links):
            n.link.close()
