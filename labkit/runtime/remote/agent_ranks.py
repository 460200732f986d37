"""The node agent's side towards its ranks (agent.py holds the loop and the notebook's side):
accepting a rank on the Unix socket (this user's processes only), forwarding its output and
control bytes, signals, stack dumps, and how it died.
"""
import fcntl
import os
import pickle
import select
import selectors
import signal
import socket
import struct
import time

from labkit.runtime import protocol
from labkit.runtime.stacks import proc_state

STACK_WAIT_S = 1.0               # how long a stack dump may take


def peer(sock) -> tuple:
    """(pid, uid) of the process at the other end of a Unix socket (from the kernel)."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


PIDFD_GET_INFO = 0xC040FF0B      # _IOWR(0xFF, 11, struct pidfd_info of 64 bytes): Linux >= 6.13
PIDFD_INFO_EXIT = 1 << 3         # Linux >= 6.15: the exit status, kept with the pidfd after the reap


def reaped_status(pidfd: int):
    """The wait status of a process that has been reaped, from a pidfd opened before it
    exited (the kernel keeps it there from Linux 6.15 on); None while it is not reaped yet,
    or on an older kernel."""
    buf = bytearray(64)
    struct.pack_into("Q", buf, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, PIDFD_GET_INFO, buf)
    except OSError:
        return None
    if not struct.unpack_from("Q", buf, 0)[0] & PIDFD_INFO_EXIT:
        return None
    return struct.unpack_from("i", buf, 60)[0]


def exit_status(pid: int, pidfd: int):
    """waitpid()-style status of a rank that has exited (its pidfd became readable), or None
    if nobody can tell any more. torchrun, its parent, reaps it within its monitor interval
    (0.1 s): until then /proc/PID/stat holds the status (a zombie's); after it the pidfd does
    (Linux >= 6.15). A busy machine can keep this agent from running for longer than 0.1 s,
    so both are asked."""
    status = reaped_status(pidfd)
    if status is not None:
        return status
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        state, status = fields[0], int(fields[-1])
    except (OSError, ValueError, IndexError):
        status = state = None
    again = reaped_status(pidfd)                  # reaped meanwhile: /proc may show another process
    if again is not None:
        return again
    return status if state in ("Z", "X") else None


def has_exited(r) -> bool:
    """Whether a rank's process has ended (a pidfd is readable once it has)."""
    return bool(select.select([r.pidfd], [], [], 0)[0])


class Rank:
    def __init__(self, slot, sock, out_fd, pid, info, stack_path):
        self.slot, self.sock, self.out_fd, self.pid, self.info = slot, sock, out_fd, pid, info
        self.stack_path, self.stack_seen = stack_path, 0
        self.pidfd = os.pidfd_open(pid)
        self.to_rank = bytearray()


class RankSide:
    """What the Agent does for its ranks; it provides sel, link, folder, ranks and slots."""

    # -- ranks -------------------------------------------------------------------------------
    def accept(self) -> None:
        try:
            s, _ = self.listener.accept()
        except OSError:
            return
        pid, uid = peer(s)
        if uid != os.getuid():
            s.close()                             # another user's process: never a rank of ours
            return
        try:
            s.settimeout(5.0)
            data, fds, _, _ = socket.recv_fds(s, 1 << 16, 1)
            info = pickle.loads(data)
        except (OSError, EOFError, pickle.UnpicklingError):
            s.close()
            return
        self.slots += 1
        r = Rank(self.slots, s, fds[0], pid, info, os.path.join(self.folder, f"stack-{pid}.txt"))
        s.sendall(pickle.dumps(("ok", r.stack_path)))
        s.setblocking(False)
        os.set_blocking(r.out_fd, False)
        self.ranks[r.slot] = r
        self.sel.register(s, selectors.EVENT_READ, ("rank", r))
        self.sel.register(r.out_fd, selectors.EVENT_READ, ("out", r))
        self.sel.register(r.pidfd, selectors.EVENT_READ, ("exit", r))
        self.link.send(protocol.RankUp(r.slot, dict(info, pid=pid)))

    def drain_output(self, r: Rank) -> None:
        while r.out_fd is not None:
            try:
                data = os.read(r.out_fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.sel.unregister(r.out_fd)
                os.close(r.out_fd)
                r.out_fd = None
                return
            self.link.send(protocol.RankOutput(r.slot, data))

    def from_rank(self, r: Rank) -> None:
        self.drain_output(r)                      # printed before it sent: forwarded before
        try:
            data = r.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.link.send(protocol.RankBytes(r.slot, data))
        else:
            self.sel.unregister(r.sock)           # its exit (pidfd) says how it ended

    def to_rank(self, r: Rank) -> None:
        try:
            n = r.sock.send(r.to_rank)
            del r.to_rank[:n]
        except BlockingIOError:
            pass
        except OSError:
            r.to_rank.clear()
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if r.to_rank else 0)
        try:
            self.sel.modify(r.sock, events, ("rank", r))
        except (KeyError, ValueError):
            pass

    def exited(self, r: Rank) -> None:
        status = exit_status(r.pid, r.pidfd)
        self.drain_output(r)
        crash = self.stack_text(r)
        self.link.send(protocol.RankDied(r.slot, status, crash))
        self.forget(r)

    def forget(self, r: Rank) -> None:
        for f in (r.sock, r.out_fd, r.pidfd):
            if f is not None:
                try:
                    self.sel.unregister(f)
                except (KeyError, ValueError):
                    pass
                try:
                    f.close() if hasattr(f, "close") else os.close(f)
                except OSError:
                    pass
        try:
            os.unlink(r.stack_path)
        except OSError:
            pass
        self.ranks.pop(r.slot, None)

    def stack_text(self, r: Rank) -> str:
        try:
            with open(r.stack_path, errors="replace") as f:
                f.seek(r.stack_seen)
                text = f.read()
        except OSError:
            return ""
        r.stack_seen += len(text.encode())
        return text

    def signal(self, slots, sig) -> None:
        for slot in slots:
            r = self.ranks.get(slot)
            if r is None:
                continue
            try:
                signal.pidfd_send_signal(r.pidfd, sig)
                if sig == signal.SIGKILL and os.getpgid(r.pid) == r.pid:
                    os.killpg(r.pid, sig)         # what the rank started goes with it
            except OSError:
                pass

    def ask_stacks(self, request, slots) -> None:
        sizes = {}
        for slot in slots:
            r = self.ranks.get(slot)
            if r is not None:
                sizes[slot] = os.path.getsize(r.stack_path) if os.path.exists(r.stack_path) else 0
                r.stack_seen = sizes[slot]
        self.signal(sizes, signal.SIGUSR1)
        self.stacks.append((request, sizes, time.monotonic() + STACK_WAIT_S))

    def answer_stacks(self) -> None:
        now = time.monotonic()
        for item in list(self.stacks):
            request, sizes, deadline = item
            grown = {s: self.ranks[s] for s in sizes if s in self.ranks and os.path.exists(
                self.ranks[s].stack_path) and os.path.getsize(self.ranks[s].stack_path) > sizes[s]}
            if len(grown) < len(sizes) and now < deadline:
                continue
            time.sleep(0.02)                      # let a dump that has started finish
            answers = {}
            for s in sizes:
                r = self.ranks.get(s)
                if r is None:
                    answers[s] = ("gone", "")
                elif s in grown:
                    answers[s] = ("dump", self.stack_text(r))
                else:
                    answers[s] = ("stopped" if proc_state(r.pid) in ("T", "t") else "silent", "")
            self.link.send(protocol.Stacks(request, answers))
            self.stacks.remove(item)
