"""Ring attention (ring_core.py: the algorithm), and its records for the timeline.

`TRACE` records, per rank, when each block computed, when each transfer was posted and when it
was found complete ("transfer"), and how long the rank waited for it ("wait": the exposed part),
while `RECORDER` is on (`labkit.trace.recording(ring.RECORDER)`: cp/runs.py's traced_step).
With `LIVE` set, `flush()` sends the records not sent yet to the notebook (labkit.emit); the
traced step calls it after forward and after backward, never from inside autograd.
"""

from labkit import trace
from labkit.cp.ring_core import (GRAD_TAG, KV_TAG, RingAttention, _chunks, _kv_shape, _post,  # noqa: F401
                                 _Posted, _wait)

TRACE = []            # (phase, step, "compute" | "transfer" | "wait", start, end), this rank
LIVE = False          # flush() emits the records (wall-clock seconds)
_sent = [0]           # how many TRACE records were emitted already


class _TraceRecorder(trace.Recorder):
    """A labkit.trace recorder whose spans land in TRACE, in its tuple form."""

    def add_span(self, name, t0, t1, tags) -> None:
        TRACE.append((tags["phase"], tags["step"], name, t0, t1))


RECORDER = _TraceRecorder(names={"compute", "transfer", "wait"})


def reset():
    """Forget the records (call before the step to trace); the step's offset to the wall clock
    is read once from then on (RECORDER.wall_shift), so what `flush` emits and what `to_wall`
    returns agree to the bit."""
    TRACE.clear()
    _sent[0] = 0
    RECORDER.restart_wall()


def to_wall(records) -> list:
    """`records` (TRACE's tuples) with their start and end on the wall clock."""
    shift = RECORDER.wall_shift()
    return [(ph, st, kind, a + shift, b + shift) for ph, st, kind, a, b in records]


def flush():
    """With LIVE set: send the records not yet sent to the notebook, on the wall clock (call it
    between steps, so that sending them is counted neither as compute nor as waiting)."""
    if not LIVE or _sent[0] >= len(TRACE):
        return
    import labkit
    for ph, st, kind, a, b in to_wall(TRACE[_sent[0]:]):
        labkit.emit(cp=kind, phase=ph, step=st, start=a, end=b)
    _sent[0] = len(TRACE)
