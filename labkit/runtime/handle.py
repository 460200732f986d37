"""A rank as the run loop sees it: what `group.RankGroup` and `collect` use of one rank,
wherever its process runs.

`RankHandle` holds the notebook's end of a rank's control connection (messages read without
ever blocking, `frames.Inbox`) and of its output pipe, and words how the rank ended
(`errors.how_it_ended`, one wording for local and remote ranks). Where the process lives is
the subclass's business, each in its own folder and neither derived from the other:

- `local/handle.py`  `LocalRank`: a process on this machine (signals, /proc, its stack file);
- `remote/handle.py` `RemoteRank`: a process under torchrun on another machine, reached
  through its node's agent (kill, stacks and exit status are messages to and from it).

A subclass sets `conn`, `out_fd`, `pid`, `main_ident` and implements the methods below that
raise NotImplementedError.
"""
import os
from multiprocessing.reduction import ForkingPickler

from labkit.i18n import N_
from labkit.runtime import errors, frames, stacks


PARTIAL_KEPT = 64 << 10      # of a line without a newline, read_lines keeps this much (its tail)


def pickled(msg) -> bytes:
    """`msg` as Connection.send pickles it."""
    return ForkingPickler.dumps(msg)


class RankHandle:
    where = None                 # the node a rank runs on, for messages ("node 1 (host b)"); None: here

    def __init__(self, pid, out_fd: int):
        self.pid = pid
        self.conn = None         # control connection, once it said hello
        self.main_ident = None   # its main thread, to pick it out of a stack dump
        self.rank = None         # None while a spare
        self.out_fd = out_fd
        os.set_blocking(out_fd, False)
        self._partial = b""
        self._inbox = frames.Inbox()
        self.eof = False         # the control connection closed
        self.garbled = None      # why a message could not be decoded, once one could not
        self.stopped_by = None   # why labkit stopped this process, if it did
        self.stack_read = 0      # how far its stack file was read (a crash dump comes after)

    # -- messages and output ----------------------------------------------------------------
    def send(self, msg) -> None:
        """One message to the rank. A rank that is gone shows up as EOF when its messages are
        read, so a failed send is left for that."""
        self.send_pickled(pickled(msg))

    def send_pickled(self, data: bytes) -> None:
        """A message already pickled by `pickled` (one task, pickled once for every rank)."""
        try:
            self.conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            pass

    def read_messages(self) -> list:
        """The whole messages that have arrived, without ever blocking (see frames.Inbox);
        sets `eof` when the connection closed and `garbled` when a message cannot be decoded."""
        msgs = self._inbox.read(-1 if self.conn.closed else self.conn.fileno())   # closed: EOF
        self.eof, self.garbled = self._inbox.eof, self._inbox.garbled
        return msgs

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
        self._partial = self._partial[-PARTIAL_KEPT:]   # a line without end: its tail only
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    # -- how it ended -------------------------------------------------------------------------
    def how_it_died(self) -> str:
        return errors.how_it_ended(self.exit_code(), N_("the rank's process"), stopped_by=self.stopped_by,
                                   lost=self.lost())

    def death(self) -> str:
        """How the rank ended, with where it crashed when a signal killed it (faulthandler
        writes the stack of a SIGSEGV or SIGABRT past what was read of its stack file)."""
        self.wait(0.5)
        how = self.how_it_died()
        code = self.exit_code()
        dump = stacks.parse_dump(self.read_stack(self.stack_read), self.main_ident)
        if dump and isinstance(code, int) and code < 0 and not self.stopped_by:
            how += "\n" + stacks.describe_stack(dump)
        return how

    def lost(self):
        """Why the node this rank ran on was lost, or None."""
        return None

    # -- what each kind of rank does its own way ------------------------------------------------
    def exit_code(self):
        """None while running; < 0 the signal that ended it; errors.UNKNOWN if nobody knows."""
        raise NotImplementedError

    def wait(self, timeout: float) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.exit_code() is None

    def kill(self, why: str = None) -> None:
        raise NotImplementedError

    def reap(self, timeout: float = 2.0) -> None:
        """After kill(): wait for the end and free the connection, pipe and files."""
        raise NotImplementedError

    def stack_size(self) -> int:
        raise NotImplementedError

    def read_stack(self, since: int = 0) -> str:
        raise NotImplementedError

    def state(self) -> str:
        """The kernel's one-letter state (R, S, D, T stopped ...), '' if unknown or gone."""
        return ""
