"""Calling the learner's function on the ranks without letting one rank's mistake cost the others.

Runs inside a rank. `attempt` calls the learner's function and catches what it raises; `settle`
then makes every rank tell the others, through the process group's key-value store (not a
collective, so it cannot meet the learner's own half-finished collectives), whether it got
through. Two things follow:

- When every rank raises (a stub's NotImplementedError, or one bug on every rank), every rank
  returns normally with what it caught: the checker answers at once and the ranks are kept.
  Without this, the first rank to raise ends the run and ranks still busy elsewhere (computing
  the checker's reference) would be taken for stuck and replaced.
- When only some ranks raise, the others are usually waiting for them inside a collective and
  never come back. The ranks that raised wait `patience` seconds for them, then raise what
  they caught (and emit it, for the checker's line); the runtime stops the stuck ranks.

A rank whose call went through waits for the others as long as the run may last: a slow rank
on a busy machine is not a hang. If the others never come, the run's timeout reports where
each rank waits (this one "in settle()": it had returned from the learner's function).
"""
import datetime
import re
import time
import traceback

HANG_LIMIT_S = 10.0     # seconds: every checker reports a hang after this (README, notebook 02);
                        # a right answer takes a few seconds at most on a busy 2-core machine
PATIENCE_S = 5.0        # seconds a rank that raised waits for the others before it gives up
# torch's C++ errors start with "[rank0]:[F1129 18:27:55.006238832 ProcessGroupGloo.cpp:1537] ":
# a time stamp that would make the checker's line differ from run to run
_CPP_PREFIX = re.compile(r"^(\[rank\d+\]:)?\[[A-Z]\d{4} [\d:.]+ [^\]]*\] ")
_NOT_MINE = ("/labkit/", "/torch/", "-packages/")      # labkit, torch, installed libraries


def _mine(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return not any(part in name for part in _NOT_MINE)


class Caught:
    """What the learner's function raised on one rank: picklable, with the learner's frames."""

    def __init__(self, exc: BaseException, rank: int):
        self.type = type(exc).__name__
        from labkit.runtime.errors import cap_text, safe_str
        self.message = cap_text(_CPP_PREFIX.sub("", safe_str(exc).strip()), 2000)
        self.rank = rank
        self.time = time.time()
        self.stub = isinstance(exc, NotImplementedError)
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [f for f in frames if _mine(f.filename)]
        # the learner's innermost frame, put into words in the notebook (describe), where a
        # cell's file name can be turned into "Cell In[7]"
        self.frame = (mine[-1].filename, mine[-1].lineno, (mine[-1].line or "").strip()) if mine else None
        self.hint = ""                  # a sentence the checker adds when it knows the cause
        self.exception = exc            # dropped when pickled (see __getstate__)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["exception"] = None
        return state

    @property
    def first_line(self) -> str:
        return self.message.splitlines()[0] if self.message else ""

    def describe(self) -> str:
        from labkit.i18n import tr
        hint = f" - {self.hint}" if self.hint else ""
        error = f"{self.type}: {self.first_line}"
        if self.frame:
            from labkit.runtime.stacks import where
            at = where(self.frame[0], self.frame[1]) + (f": {self.frame[2]}" if self.frame[2] else "")
            return tr("failed on rank {rank}: {error} at {at}", rank=self.rank, error=error, at=at) + hint
        return tr("failed on rank {rank}: {error}", rank=self.rank, error=error) + hint


def attempt(fn, *args, **kwargs):
    """(value, None), or (None, Caught) when fn raised anything: a KeyboardInterrupt or
    SystemExit raised by the learner's code too (ranks ignore Ctrl-C, so it is the code's own),
    else the other ranks would wait the checker's whole timeout for this one."""
    import labkit
    try:
        return fn(*args, **kwargs), None
    except BaseException as exc:        # noqa: B902 - every rank must reach settle()
        return None, Caught(exc, labkit.rank())


def _store():
    import torch.distributed as dist
    # torch keeps the store the process group was made with; there is no public getter.
    return dist.distributed_c10d._get_default_store()


def settle(token: tuple, key: str, flag=None) -> list:
    """Tell every rank whether this one's call raised or went wrong (`flag`: a Caught, a
    problem, or None when all is well); return each rank's answer (True = flagged), by rank.
    A rank that caught an exception waits at most the patience (seconds) that `token` =
    (name, patience) carries, then raises it. The name is unique to one checker call
    (core.new_token), `key` to one call of the learner's function."""
    import torch.distributed as dist
    token, patience = token
    rank, n = dist.get_rank(), dist.get_world_size()
    store = _store()
    keys = [f"labkit-check/{token}/{key}/{r}" for r in range(n)]
    store.set(keys[rank], "1" if flag is not None else "0")
    raised = getattr(flag, "exception", None)
    if raised is None:
        store.wait(keys, datetime.timedelta(seconds=24 * 3600))
    else:
        # poll rather than store.wait(timeout): its timeout prints C++ warnings into the cell
        deadline = time.monotonic() + patience
        while not store.check(keys):
            if time.monotonic() > deadline:             # someone is stuck
                import labkit
                labkit.emit(learner_raised=flag)        # so the checker can still say what it was
                raise raised from None
            time.sleep(0.02)
    return [store.get(k) == b"1" for k in keys]


class OutOfTime(BaseException):
    """The learner's code ran past the checker's limit in this process (a BaseException, so an
    ``except Exception`` in the learner's loop cannot swallow it). `at` is the learner's
    innermost frame when the limit struck: (filename, lineno, source line) or None."""

    def __init__(self, seconds: float, at=None):
        super().__init__(seconds)
        self.seconds, self.at = seconds, at

    def describe(self) -> str:
        from labkit.i18n import tr
        if self.at:
            from labkit.runtime.stacks import where as _where
            at = _where(self.at[0], self.at[1]) + (f": {self.at[2]}" if self.at[2] else "")
            return tr("hung: your function had not returned after {s:g} s at {at} (a loop that never "
                      "ends? check its condition and what each pass changes)", s=self.seconds, at=at)
        return tr("hung: your function had not returned after {s:g} s (a loop that never "
                  "ends? check its condition and what each pass changes)", s=self.seconds)


def _learner_at(frame):
    """(filename, lineno, line) of the innermost frame of `frame`'s stack that is the learner's."""
    import linecache
    while frame is not None:
        if _mine(frame.f_code.co_filename):
            name, line = frame.f_code.co_filename, frame.f_lineno
            return name, line, linecache.getline(name, line).strip()
        frame = frame.f_back
    return None


class time_limit:                                           # noqa: N801 - used as a context manager
    """``with time_limit(s): fn(...)``: the learner's code that a checker calls in this process
    (the notebook's own, not a rank) gets the same limit as on the ranks (HANG_LIMIT_S). Past it
    the code is interrupted where it is: by SIGALRM in the main thread (a `while` loop, a sleep,
    anything that returns to Python now and then), else by a trace function that checks the
    clock on every line. Raises OutOfTime with the learner's line."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)

    def __enter__(self):
        import signal
        import sys
        import threading
        self.deadline = time.monotonic() + self.seconds
        self.alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        if self.alarm:
            self.old = signal.signal(signal.SIGALRM, self._ring)
            self.old_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds)
        else:
            self.old = sys.gettrace()
            sys.settrace(self._trace)
        return self

    def _ring(self, signum, frame):
        raise OutOfTime(self.seconds, _learner_at(frame))

    def _trace(self, frame, event, arg):
        if time.monotonic() > self.deadline:
            raise OutOfTime(self.seconds, _learner_at(frame))
        return self._trace

    def __exit__(self, *exc):
        import signal
        import sys
        if self.alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
            left = self.old_timer[0]
            if left:                                        # someone else's alarm: put it back
                signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - self.deadline + self.seconds), 1e-3),
                                 self.old_timer[1])
        else:
            sys.settrace(self.old)
        return False
