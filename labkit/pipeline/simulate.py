"""Time a schedule without processes: a timeline per stage, the bubble, activations alive.

    t = simulate(one_f_one_b(4, 8), forward=1, backward=1, weight=1)   # B = I + W = 2
    t.bubble, t.makespan, t.peak_activations                          # 0.273, 33.0, [4, 3, 2, 1]

Times are per action, in any unit: with v chunks per rank an action runs 1/v of a rank's
layers, so divide the times by v to compare with v = 1. A fused B costs backward + weight; a
zero-bubble schedule's I costs `backward` and its W `weight`. Each value may be one number, a
list by stage (an unequal pipeline), or a function (rank, action) -> time. `send` is the time
from a producer's end to its consumer's start on another rank: one number, or a function
(producer rank, producer action) -> time.
"""
from dataclasses import dataclass, field

from labkit.pipeline.validate import ScheduleError, ensure_valid, play

__all__ = ["simulate", "Timeline", "bubble_of", "peak_in_flight", "held_in_order"]


@dataclass
class Timeline:
    """What each stage did and when: intervals[r] = [(start, end, action)] in the run's units."""
    name: str
    stages: int
    microbatches: int
    chunks: int
    intervals: list
    measured: bool = False          # True for an executor's time stamps, False for simulate()
    extra: dict = field(default_factory=dict)
    layout: str = "loop"            # where each chunk's part sits (Schedule.layout)

    @property
    def makespan(self) -> float:
        ends = [e for ivs in self.intervals for _, e, _ in ivs]
        starts = [s for ivs in self.intervals for s, _, _ in ivs]
        return max(ends) - min(starts) if ends else 0.0

    @property
    def busy(self) -> list:
        return [sum(e - s for s, e, a in ivs if a.is_compute) for ivs in self.intervals]

    @property
    def bubble(self) -> float:
        """1 - (sum of busy time) / (p x makespan): idle over total, as bubble_ratio."""
        return bubble_of(self.busy, self.makespan)

    @property
    def idle(self) -> list:
        """Per rank, the makespan minus its busy time: what the papers' bubble formulas give."""
        return [self.makespan - b for b in self.busy]

    @property
    def span_bubble(self) -> float:
        """The zero-bubble papers' convention (Qi et al.): 1 - busy / the longest rank's span, a
        rank's span running from its own first start to its own last end, so the wait of the
        last ranks for their first input is not counted."""
        spans = [max(e for _, e, _ in ivs) - min(s for s, _, _ in ivs) for ivs in self.intervals if ivs]
        return 1.0 - max(self.busy) / max(spans) if spans and max(spans) > 0 else 0.0

    @property
    def peak_activations(self) -> list:
        return peak_in_flight(self.intervals)

    def summary(self) -> str:
        kind = "measured" if self.measured else "simulated"
        return (f"{self.name}, p={self.stages}, m={self.microbatches}"
                f"{', v=%d' % self.chunks if self.chunks > 1 else ''}: {kind} bubble {self.bubble:.3f}, "
                f"makespan {self.makespan:.3g}, peak micro-batches alive per stage {self.peak_activations}")


def bubble_of(busy: list, makespan: float) -> float:
    return 1.0 - sum(busy) / (len(busy) * makespan) if makespan > 0 else 0.0


def peak_in_flight(intervals: list) -> list:
    """Per stage, the most (micro-batch, chunk) activation sets alive at once: from the start of
    a forward to the end of its backward (of its W when the backward is split)."""
    peaks = []
    for ivs in intervals:
        split = {(a.mb, a.chunk) for _, _, a in ivs if a.kind == "W"}
        events = []
        for s, e, a in ivs:
            if a.kind == "F":
                events.append((s, 1))
            elif a.kind == "B" or (a.kind == "W") or (a.kind == "I" and (a.mb, a.chunk) not in split):
                events.append((e, -1))
        live = peak = 0
        for _, d in sorted(events, key=lambda x: (x[0], x[1])):   # a free at t before a new F at t
            live += d
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def held_in_order(schedule, set_bytes=None) -> list:
    """Per rank, the most activations alive at once, counted from its action list alone (a
    rank runs its list in order, so no timing is needed): a forward adds its (micro-batch,
    chunk) set, its backward (its W when split) frees it. In micro-batches' worth (a set is 1/v
    of one micro-batch through the rank's layers), or in bytes with set_bytes[r][chunk]."""
    s = ensure_valid(schedule)
    split = [{(a.mb, a.chunk) for a in acts if a.kind == "W"} for acts in s.actions]
    peaks = []
    for r, acts in enumerate(s.actions):
        size = (lambda c: 1) if set_bytes is None else (lambda c: set_bytes[r][c])
        live = peak = 0
        for a in acts:
            if a.kind == "F":
                live += size(a.chunk)
                peak = max(peak, live)
            elif a.kind in ("B", "W") or (a.kind == "I" and (a.mb, a.chunk) not in split[r]):
                live -= size(a.chunk)
        peaks.append(peak / s.chunks if set_bytes is None else peak)
    return peaks


def _cost(value, name):
    if callable(value):
        return value
    if isinstance(value, (list, tuple)):
        return lambda r, a: float(value[r])
    if not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a time >= 0, a list by stage or a function (rank, action), "
                         f"got {value!r}")
    return lambda r, a: float(value)


def simulate(schedule, forward=1.0, backward=1.0, weight=1.0, send=0.0) -> Timeline:
    """Play a valid schedule with these action times (see the module docstring). ScheduleError
    if it cannot run (validate() says why)."""
    s = ensure_valid(schedule)
    f, b, w = _cost(forward, "forward"), _cost(backward, "backward"), _cost(weight, "weight")
    if not callable(send) and (isinstance(send, (list, tuple)) or send < 0):
        raise ValueError(f"send must be a time >= 0 or a function (producer rank, action), got {send!r}")

    def cost(r, a):
        return {"F": f, "I": b, "W": w}[a.kind](r, a) if a.kind != "B" else b(r, a) + w(r, a)

    intervals, stuck = play(s, cost, send=send if callable(send) else float(send))
    if stuck:                                   # cannot happen after ensure_valid, but say so
        raise ScheduleError(f"stages {sorted(stuck)} got stuck")
    intervals = [[iv for iv in ivs if iv[2].is_compute] for ivs in intervals]
    return Timeline(s.name, s.stages, s.microbatches, s.chunks, intervals, layout=s.layout)
