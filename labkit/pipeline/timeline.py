"""From the executor's time stamps to a measured Timeline, and the costs simulate() needs.

    results = cluster.run(run_schedule, s, pad=0.01)
    t = timeline_of(results, s)                 # Timeline(measured=True), seconds since the start
    sim = simulate(s, **measured_costs(t))      # the same schedule with the measured times
    held_measured(t)                            # peak activations per rank, in micro-batches' worth
"""
import statistics

from labkit.pipeline.schedules import Action, vstage_of
from labkit.pipeline.simulate import Timeline, simulate
from labkit.pipeline.validate import as_schedule

__all__ = ["timeline_of", "measured_costs", "simulated_twin", "held_measured"]


def timeline_of(results: list, schedule) -> Timeline:
    """The ranks' run_schedule results -> Timeline in seconds from the first rank's start."""
    s = as_schedule(schedule)
    t0 = min(r["start"] for r in results)
    intervals = [[(a - t0, b - t0, Action(k, mb, c)) for a, b, k, mb, c in r["intervals"]]
                 for r in sorted(results, key=lambda r: r["rank"])]
    waits = [[(a - t0, b - t0, k, mb, vs) for a, b, k, mb, vs in r["waits"]] for r in results]
    extra = {"peak_bytes": [r["peak_bytes"] for r in results],
             "set_bytes": [r.get("set_bytes") for r in results], "waits": waits,
             "loss": sum(r["loss"] for r in results),
             "grad_diff": max(r["grad_diff"] for r in results),
             "grad_mismatch": [n for r in results for n in r["grad_mismatch"]],
             "pad": results[0]["pad"], "sizes": [r["sizes"] for r in results]}
    return Timeline(s.name, s.stages, s.microbatches, s.chunks, intervals, measured=True, extra=extra,
                    layout=s.layout)


def held_measured(t: Timeline) -> list:
    """Per rank, the peak bytes its layers saved for backward over the bytes one micro-batch
    saves through all its layers (all chunks): activations held, in micro-batches' worth, as
    held_in_order() counts them. Exact when every layer saves the same (run with frozen=None)."""
    return [peak / sum(sets) for peak, sets in zip(t.extra["peak_bytes"], t.extra["set_bytes"])]


def _transfers(t: Timeline) -> tuple:
    """{(kind, mb, producing vstage): seconds} for every transfer whose receiver was already
    waiting when the data was produced (its end minus the producer's end), and {same key:
    producer (rank, action)}."""
    ends, who = {}, {}
    for r, ivs in enumerate(t.intervals):
        for s, e, a in ivs:
            if a.kind in ("F", "B", "I"):
                key = ("F" if a.kind == "F" else "B", a.mb, vstage_of(t.stages, r, a.chunk, t.layout))
                ends[key], who[key] = e, (r, a)
    seen = {}
    for ws in t.extra.get("waits", []):
        for w0, w1, kind, mb, src_vs in ws:
            produced = ends.get((kind, mb, src_vs))
            if produced is not None and w0 <= produced:
                seen[(kind, mb, src_vs)] = max(0.0, w1 - produced)
    return seen, who


def measured_costs(t: Timeline) -> dict:
    """Median measured time of each kind of action per stage, and the median send latency (over
    transfers whose receiver was already waiting: receive end minus the producer's end)."""
    costs = {}
    for kind, name in (("F", "forward"), ("I", "backward"), ("W", "weight")):
        costs[name] = [statistics.median([e - s for s, e, a in ivs if a.kind == kind] or [0.0])
                       for ivs in t.intervals]
    fused = [statistics.median([e - s for s, e, a in ivs if a.kind == "B"] or [0.0]) for ivs in t.intervals]
    if any(fused):      # a fused B: split its time like the padding does, half I, half W
        costs["backward"] = [b / 2 for b in fused]
        costs["weight"] = [b / 2 for b in fused]
    seen, _ = _transfers(t)
    costs["send"] = statistics.median(seen.values()) if seen else 0.0
    return costs


def simulated_twin(t: Timeline, schedule, exact: bool = True) -> Timeline:
    """simulate() of the same schedule with this run's measured times. exact=True: each action's
    own measured duration and each observed transfer's own latency (the median for transfers
    whose receiver was not yet waiting); exact=False: medians per stage and kind."""
    c = measured_costs(t)
    if exact:
        took = {(r, a): e - s for r, ivs in enumerate(t.intervals) for s, e, a in ivs}
        seen, who = _transfers(t)
        lag = {who[k]: v for k, v in seen.items()}
        median = c["send"]
        c["forward"] = c["backward"] = lambda r, a: took[(r, a)]
        c["weight"] = lambda r, a: 0.0 if a.kind == "B" else took[(r, a)]
        c["send"] = lambda r, a: lag.get((r, a), median)
    twin = simulate(as_schedule(schedule), **c)
    twin.extra["seconds"] = True
    return twin
