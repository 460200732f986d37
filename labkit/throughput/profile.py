"""The communication share read from torch.profiler, next to the timers' share.

The notes' tool list: "torch profiler → 定位计算/通信时间占比". The profiler records every
operator with its start and end; a collective shows as `c10d::allreduce_` (the call) and
its wait. Summing the time inside collectives over the profiled wall time gives the share
without putting timers in the training loop - the way one finds it in a real job.
"""
import time

from torch.profiler import ProfilerActivity, profile

COMM_WORDS = ("allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter", "broadcast",
              "wait")


def _is_comm(name: str) -> bool:
    n = name.lower()
    return ("c10d" in n or "gloo" in n or "nccl" in n) and any(w in n for w in COMM_WORDS)


def profiled_comm_share(step, steps: int = 3) -> dict:
    """On a rank: run `step()` `steps` times under torch.profiler (CPU activity) and return
    {"comm_s", "wall_s", "share", "ops"}: seconds inside top-level collective operators, wall
    seconds, their ratio, and the collective operator names seen."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - t0
    events = [e for e in prof.events() if _is_comm(e.name)]
    # keep only outermost collective events (a c10d op may contain gloo's own record)
    events.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
    comm_us, end = 0.0, -1.0
    for e in events:
        if e.time_range.start >= end:
            comm_us += e.time_range.end - e.time_range.start
            end = e.time_range.end
        elif e.time_range.end > end:
            comm_us += e.time_range.end - end
            end = e.time_range.end
    return {"comm_s": comm_us / 1e6, "wall_s": wall, "share": comm_us / 1e6 / wall if wall else 0.0,
            "ops": sorted({e.name for e in events})}


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
