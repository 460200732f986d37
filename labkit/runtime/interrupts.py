"""Ctrl-C during a run, made safe to press twice.

The first interrupt stops the run: the Cluster then stops its ranks and starts fresh ones.
A second interrupt a few milliseconds later used to land in the middle of that clean-up and
leave the cluster half-stopped. While a run is in progress (on the main thread, with Python's
ordinary SIGINT handler in place) `Guard` turns the first SIGINT into KeyboardInterrupt as
usual and holds back the ones that follow until the clean-up is done.
"""
import signal
import threading

_guards = []                   # the guards in force, innermost last


def is_real(exc: BaseException) -> bool:
    """Whether `exc` is an interrupt somebody pressed (Ctrl-C, SIGINT), not a KeyboardInterrupt
    (or SystemExit...) that code raised on the notebook's side during a run: unpickling a result,
    an on_event callback. Where no guard watches SIGINT (another thread, a handler of the
    learner's), a KeyboardInterrupt counts as pressed."""
    if not isinstance(exc, KeyboardInterrupt):
        return False
    guard = next((g for g in reversed(_guards) if g.active), None)
    return guard is None or guard._interrupted


def stopped(n: int, what: str = None) -> KeyboardInterrupt:
    """What the Cluster raises once an interrupt has stopped its `n` ranks during `what` (None:
    a run)."""
    from labkit.i18n.messages import tr
    if what is None:
        return KeyboardInterrupt(tr("interrupted: the {n} ranks were stopped; the next run "
                                    "starts fresh ones", n=n))
    return KeyboardInterrupt(tr("interrupted: {what} was stopped and the {n} ranks with it; "
                                "the next run starts fresh ones", what=what, n=n))


class Guard:
    def __init__(self):
        self.active = False
        self.held_back = 0             # interrupts that arrived during the clean-up
        self._interrupted = False
        self._previous = None

    def _handler(self, signum, frame):
        if self._interrupted:
            self.held_back += 1
            return
        self._interrupted = True
        raise KeyboardInterrupt

    def shield(self) -> None:
        """From now on until the guard ends, interrupts are held back (the clean-up runs)."""
        self._interrupted = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    self._previous = signal.signal(signal.SIGINT, self._handler)
                    self.active = True
                    _guards.append(self)
            except (ValueError, TypeError):
                pass
        return self

    def __exit__(self, *exc):
        if self.active:
            signal.signal(signal.SIGINT, self._previous)
            self.active = False
            if self in _guards:
                _guards.remove(self)
        return False
