"""A slow link for labkit's own sends: a start-up cost per message and a rate, on this rank.

    with link.throttled(alpha=5e-3, rate=20e6):    # on a rank: 5 ms per message, 20 MB/s
        ring_all_reduce(x)                         # every send of labkit's rings is paced

Loopback between processes on one machine is too fast, and too noisy on shared cores, to show
what a network does. Inside `throttled`, each send made by labkit's rings (`ring.exchange`,
`ring_fast`) and each collective `charge`d by a strategy (ZeRO's all-gathers on gloo) waits
for this rank's outgoing link, modelled as a token bucket with no burst: a message of n bytes
occupies the link for alpha + n / rate seconds, one message after another (a NIC sends one
packet at a time). The data still travel over loopback and arrive intact; only the sender's
timing is that of the slow link. Times measured inside are therefore the schedule's times on
that link (how many messages, one after another, how many bytes each), which is what the
ring's cost model 2(N-1) alpha + 2(N-1)/N S / rate is about.

Layer 1: no torch here; `time.sleep` does the waiting (no CPU spent).
"""
import contextlib
import time

_state = {"alpha": 0.0, "rate": None, "free_at": 0.0, "on": False, "messages": 0, "bytes": 0}


def active() -> bool:
    return _state["on"]


@contextlib.contextmanager
def throttled(alpha: float = 0.0, rate: float = None):
    """Pace this rank's sends: `alpha` seconds per message, `rate` bytes per second (None:
    no byte cost). Nested calls replace the settings until they exit."""
    if alpha < 0 or (rate is not None and rate <= 0):
        from labkit.i18n import tr
        raise ValueError(tr("throttled: alpha must be >= 0 and rate > 0 (bytes per second) or None, "
                            "got alpha={alpha}, rate={rate}", alpha=alpha, rate=rate))
    saved = dict(_state)
    _state.update(alpha=float(alpha), rate=rate, free_at=0.0, on=True, messages=0, bytes=0)
    try:
        yield _state
    finally:
        _state.clear()
        _state.update(saved)


def charge(nbytes: int, messages: int = 1) -> None:
    """Hold the caller until this rank's link has carried `messages` messages of `nbytes`
    bytes in all (called just before the send is posted). Does nothing outside `throttled`."""
    if not _state["on"] or messages <= 0:
        return
    busy = messages * _state["alpha"] + (nbytes / _state["rate"] if _state["rate"] else 0.0)
    now = time.perf_counter()
    _state["free_at"] = max(now, _state["free_at"]) + busy
    _state["messages"] += messages
    _state["bytes"] += nbytes
    wait = _state["free_at"] - now
    if wait > 0:
        time.sleep(wait)
