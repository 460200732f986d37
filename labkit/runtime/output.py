"""A rank's output on its way to the cell: whole lines, live partial lines, and a cap.

Lines reach the cell as ``[rank N] ...`` as soon as they are printed. A line still being
written (``print(..., end="")``, a progress bar redrawn with ``\\r``) shows live too: in a
notebook each rank's line that stays unfinished for 0.1 s gets a display of its own
(``display_id``) that is redrawn in place at most every 0.1 s, so the bars of several ranks
never write over each other; when the line ends, that display keeps its final text. (A plain
``print`` writes its text and its newline separately, microseconds apart: the 0.1 s keeps
such lines ordinary text.) Outside a notebook an unfinished
line shows when it ends (or when the run ends). Carriage returns are applied as a terminal
would: ``"10%\\r20%"`` shows ``20%``.

Each rank may show at most `max_lines` lines and `max_bytes` bytes per run (the Cluster's
``output_lines`` and ``output_bytes``); after that its output is still read from the pipe, so
the rank never blocks, and the run ends with ``[rank N] ... 123 lines not shown``.

Lines that torch's C++ code logs (c10/glog lines such as ``[E1201 11:08:47.5 ProcessGroupGloo.cpp:
143] ...``, ``terminate called ...``, ``what(): ...``, ``Exception raised from ...``, ``frame #3: ...``)
are not the learner's: they are folded into one line per rank per run, with the most telling
of them, and kept whole in `Outputs.native` (``cluster.native_log(rank)``).
"""
import re
import sys
import time

from labkit.i18n.messages import tr, trn

NATIVE = re.compile(r"^(\[?[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+\s|terminate called |  what\(\): |"
                    r"Exception raised from |frame #\d+: |Check failed|\*\*\* Check failure)")

LIVE_EVERY_S = 0.1       # at most this often a live line is redrawn
PARTIAL_CHECK = 64 << 10  # an unfinished line is first bounded at this size (then each doubling)


def overwrite(text: str) -> str:
    """What a terminal shows for one line containing carriage returns."""
    if "\r" not in text:
        return text
    shown = ""
    for seg in text.split("\r"):
        shown = seg + shown[len(seg):]
    return shown


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
        return getattr(get_ipython(), "kernel", None) is not None
    except ImportError:
        return False


class Screen:
    """Where lines go: stdout, plus (in a notebook) one live display per unfinished line."""

    def __init__(self):
        self.live = _in_kernel()

    def line(self, rank: int, text: str) -> None:
        sys.stdout.write(f"[rank {rank}] {text}\n")
        sys.stdout.flush()

    def show(self, rank: int, text: str, handle=None):
        """Draw (or redraw, given its handle) a rank's unfinished line; returns the handle."""
        from IPython.display import display
        data = {"text/plain": f"[rank {rank}] {text}"}
        if handle is None:
            sys.stdout.flush()
            return display(data, raw=True, display_id=True)
        handle.update(data, raw=True)
        return handle


class RankOutput:
    """One rank's output stream: bytes in, lines and live redraws out, within a budget."""

    def __init__(self, rank: int, screen: Screen, max_lines=None, max_bytes=None):
        self.rank = rank
        self.screen = screen
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self._buf = bytearray()    # the unfinished line (at most max_bytes of its tail)
        self._partial_cut = 0      # bytes cut from its head
        self._partial_check = PARTIAL_CHECK
        self._since = 0.0          # when the unfinished line began
        self.reset()

    def reset(self, max_lines=..., max_bytes=...) -> None:
        """A new run: a fresh budget (new limits, if given)."""
        if max_lines is not ...:
            self.max_lines = max_lines
        if max_bytes is not ...:
            self.max_bytes = max_bytes
        self.lines = 0
        self.bytes = 0
        self.hidden = 0            # lines not shown because the budget was spent
        self.native = []           # C++ log lines of this run, folded into one line (at most
        self.native_count = 0      # max_lines / max_bytes of them kept: all are counted)
        self._native_bytes = 0
        self._handle = None        # live display of the unfinished line
        self._drawn = None         # text it shows
        self._drawn_at = 0.0

    def _over(self, text: str, lines: int = None, nbytes: int = None) -> bool:
        """Would `text` pass the budget after `lines` lines and `nbytes` bytes (the learner's
        shown output by default)?"""
        lines = self.lines if lines is None else lines
        nbytes = self.bytes if nbytes is None else nbytes
        if self.max_lines is not None and lines >= self.max_lines:
            return True
        return self.max_bytes is not None and nbytes + len(text.encode()) + 1 > self.max_bytes

    def _finish_line(self, text: str) -> None:
        text = overwrite(text)
        if NATIVE.match(text):                   # kept within a budget like the learner's own
            self.native_count += 1
            if not self._over(text, len(self.native), self._native_bytes):
                self.native.append(text)
                self._native_bytes += len(text.encode()) + 1
            return
        if self.hidden or self._over(text):
            self.hidden += 1
            self._handle = None
            return
        self.lines += 1
        self.bytes += len(text.encode()) + 1
        if self._handle is not None:             # already on screen: give it its final text
            if self._drawn != text:
                self.screen.show(self.rank, text, self._handle)
            self._handle = None
        else:
            self.screen.line(self.rank, text)

    def feed(self, data: bytes) -> None:
        if not data:
            self.tick()
            return
        had_partial = bool(self._buf)
        end = data.rfind(b"\n")
        if end < 0:                               # still the same unfinished line: append
            self._buf += data
            self._bound_partial()
            lines = ()
        else:                                     # only the unfinished line is joined, once
            lines = (bytes(self._buf) + data[:end]).split(b"\n")
            self._buf = bytearray(data[end + 1:])
            self._partial_cut, self._partial_check = 0, PARTIAL_CHECK
            self._bound_partial()
        for ln in lines:
            self._finish_line(ln.decode("utf-8", "replace"))
        if self._buf and (lines or not had_partial):
            self._since = time.monotonic()       # when the unfinished line began
        self.tick()

    def _bound_partial(self) -> None:
        """Keep an unfinished line within `max_bytes` (its tail, as a terminal would show it),
        in time linear in what arrives: a line is applied its carriage returns and cut only
        each time it has doubled (issue 39: 64 MB without a newline took 54 s, copied on every
        read)."""
        if len(self._buf) <= self._partial_check:
            return
        if b"\r" in self._buf:                   # a progress bar: what a terminal shows of it
            self._buf = bytearray(overwrite(self._buf.decode("utf-8", "replace")).encode())
        if self.max_bytes is not None and len(self._buf) > self.max_bytes:
            cut = len(self._buf) - self.max_bytes
            del self._buf[:cut]
            self._partial_cut += cut
        self._partial_check = max(2 * len(self._buf), PARTIAL_CHECK)

    def tick(self, force: bool = False) -> None:
        """Redraw the unfinished line if it changed (throttled unless `force`)."""
        if not self.screen.live or not self._buf or self.hidden:
            return
        now = time.monotonic()
        if not force and (now - self._drawn_at < LIVE_EVERY_S or now - self._since < LIVE_EVERY_S):
            return
        text = overwrite(self._buf.decode("utf-8", "replace"))
        if text != self._drawn and not self._over(text):
            self._handle = self.screen.show(self.rank, text, self._handle)
            self._drawn, self._drawn_at = text, now

    def finish(self) -> str:
        """End of a run: the unfinished line as it stands, then what was not shown. Returns
        the C++ log lines of the run (folded into one line here)."""
        if self._buf:
            text, self._buf = self._buf.decode("utf-8", "replace"), bytearray()
            self._partial_check = PARTIAL_CHECK
            self._finish_line(text)
        native = self.native
        if native:
            key = next((ln for ln in native if ln.startswith(("  what():", "Check failed"))), None)
            key = key or next((ln for ln in native if ln[:2] in ("[E", "[F", "E", "F")), native[0])
            key = re.sub(r"^\[?[EWIF]\d{4} \S+ (\d+ )?", "", key).strip()
            key = key if len(key) <= 160 else key[:157] + "..."
            if self.native_count == len(native):
                self.screen.line(self.rank, trn(
                    "(torch's C++ log: {n} line folded, e.g. {key}; all of them: cluster.native_log({rank}))",
                    "(torch's C++ log: {n} lines folded, e.g. {key}; all of them: cluster.native_log({rank}))",
                    len(native), key=repr(key), rank=self.rank))
            else:
                self.screen.line(self.rank, tr(
                    "(torch's C++ log: {n:,} lines folded, e.g. {key}; the first {kept:,} of "
                    "them: cluster.native_log({rank}), at most cluster.output_lines / "
                    "cluster.output_bytes)", n=self.native_count, key=repr(key), kept=len(native),
                    rank=self.rank))
        if self._partial_cut:
            self.screen.line(self.rank, tr(
                "... {n:,} bytes of a line without a newline not shown (at most {limit:,} bytes "
                "per rank per run: cluster.output_bytes)", n=self._partial_cut, limit=self.max_bytes))
            self._partial_cut = 0
        if self.hidden:
            limits = []
            if self.max_lines is not None:
                limits.append(f"{self.max_lines:,} lines")
            if self.max_bytes is not None:
                limits.append(f"{self.max_bytes:,} bytes")
            self.screen.line(self.rank, f"... {self.hidden:,} lines not shown (at most "
                                        f"{' or '.join(limits)} per rank per run; change "
                                        "cluster.output_lines / cluster.output_bytes)")
        self.reset()
        return native


class Outputs:
    """The output of every worker of a Cluster, by process."""

    def __init__(self):
        self.screen = Screen()
        self._by_pid = {}
        self.native = {}           # rank -> C++ log lines of its last run that had some

    def _of(self, w) -> RankOutput:
        o = self._by_pid.get(w.pid)
        if o is None:
            o = self._by_pid[w.pid] = RankOutput(w.rank, self.screen)
        o.rank = w.rank
        return o

    def new_run(self, w, max_lines, max_bytes) -> None:
        self._of(w).reset(max_lines, max_bytes)

    def show(self, w, final: bool = False, read: bool = True) -> None:
        """What `w` printed, to the cell. read=False: its pipe is known to be empty (a poll
        said so): only its unfinished line's redraw and, if final, the end of its run."""
        o = self._of(w)
        o.feed(w.read_output() if read else b"")
        if final:
            native = o.finish()
            if native:
                self.native[o.rank] = native

    def show_all(self, ranks, out_poll, final: bool = False) -> None:
        """What every rank of `ranks` printed, to the cell; `out_poll` (a select.poll of their
        output pipes) says which pipes hold bytes, and only those are read."""
        ready = {fd for fd, _ in out_poll.poll(0)}
        for w in ranks:
            self.show(w, final=final, read=w.out_fd in ready)

    def redraw(self, w) -> None:
        """Redraw `w`'s unfinished line if its redraw is due, reading nothing (what arrived on
        its pipe was read when the pipe said so)."""
        self._of(w).tick()

    def forget(self, w) -> None:
        self._by_pid.pop(w.pid, None)
