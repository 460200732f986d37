"""The communication share read from torch.profiler, next to the timers' share.

The notes' tool list: "torch profiler → 定位计算/通信时间占比". The profiler records every
operator with its start and end; a collective shows as `c10d::allreduce_` (the call) and
its wait. Summing the time inside collectives over a step's wall time gives the share
without putting timers in the training loop - the way one finds it in a real job. Each step
is marked (`record_function`), and the share is the median of the steps' shares.
"""
import os
import statistics
import time

from torch.profiler import ProfilerActivity, profile, record_function

COMM_WORDS = ("allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter", "broadcast",
              "wait")


def _is_comm(name: str) -> bool:
    n = name.lower()
    return ("c10d" in n or "gloo" in n or "nccl" in n) and any(w in n for w in COMM_WORDS)


STEP_MARK = "labkit::step"


def _union_us(ranges, lo: float, hi: float) -> float:
    """Microseconds covered by the union of (start, end) `ranges` clipped to [lo, hi]: nested
    records (a c10d call and gloo's own record inside it) count once."""
    total, end = 0.0, lo
    for s, e in sorted(ranges):
        s, e = max(s, end), min(e, hi)
        if e > s:
            total += e - s
            end = e
    return total


def profiled_comm_share(step, steps: int = 5) -> dict:
    """On a rank: run `step()` `steps` times under torch.profiler (CPU activity), each inside a
    `record_function("labkit::step")`, and return {"comm_s", "wall_s", "share", "step_shares",
    "ops"}: seconds inside collective operators and wall seconds over all the steps, the
    median of the steps' own shares (as `timed_run` takes the median of its steps, so that one
    step slowed by another program does not decide), each step's share, and the collective
    operator names seen."""
    # torch 2.13's profiler library (kineto) writes "USDT: ... profiler_start" and
    # "profiler_stop" to stderr on every run, which every rank would print into the notebook:
    # level 6 keeps it quiet (it is read when the profiler first starts; a value set by the
    # learner is kept). Errors still reach Python as exceptions.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            with record_function(STEP_MARK):
                step()
        wall = time.perf_counter() - t0
    events = prof.events()
    comm = [e for e in events if _is_comm(e.name)]
    spans = [(e.time_range.start, e.time_range.end) for e in comm]
    steps_us = [(_union_us(spans, s, e), e - s) for s, e in
                sorted((e.time_range.start, e.time_range.end) for e in events if e.name == STEP_MARK)
                if e > s]                         # (comm, wall) of each step, in microseconds
    shares = [c / w for c, w in steps_us]
    return {"comm_s": sum(c for c, _ in steps_us) / 1e6, "wall_s": wall,
            "share": statistics.median(shares) if shares else 0.0, "step_shares": shares,
            "ops": sorted({e.name for e in comm})}


def share_verdict(results, threshold: float = 0.30) -> bool:
    """One verdict line for `profiled_scenario`'s results (one dict per rank): ok when the
    timers and torch.profiler both put the communication share above `threshold` (the notes'
    30 %) on every rank, MISS otherwise; the range of each on the ranks in the line."""
    from labkit.i18n import tr
    from labkit.verdict import verdict
    timers, prof = [r["timers"] for r in results], [r["profiler"] for r in results]
    ok = min(timers) > threshold and min(prof) > threshold
    return verdict(ok, tr("communication share above {t:.0%} on every rank: timers {a:.0%} to {b:.0%}, "
                          "torch.profiler {c:.0%} to {d:.0%}", t=threshold, a=min(timers), b=max(timers),
                          c=min(prof), d=max(prof)))
