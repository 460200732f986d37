"""Pipeline schedules as data (layer 1: pure, no torch, no processes).

A schedule is, for each stage (rank), the ordered list of what it does:

    F(i)   forward of micro-batch i          B(i)   backward of micro-batch i (input + weight grads)
    I(i)   input-gradient half of B (zero-bubble schedules)   W(i)   weight-gradient half
    SEND_F / RECV_F / SEND_B / RECV_B   explicit point-to-point steps (see `with_comms`)

With v chunks per rank (interleaved 1F1B) rank r holds virtual stages r, p+r, 2p+r, ...
(Megatron's layout), and an action names its chunk: F(i, chunk=1).

    gpipe(4, 8).actions[0]    -> [F0, F1, ..., F7, B0, ..., B7]
    one_f_one_b(4, 8)         # warm-up p-1-r forwards, then F/B pairs, then the remaining B
"""
from labkit.pipeline import schedules_v
from labkit.pipeline.actions import (COMMS, COMPUTE, LAYOUTS, NAMES, Action, B, F, I,  # noqa: F401
                                     Schedule, W, _args, vstage_of)

__all__ = ["Action", "Schedule", "LAYOUTS", "vstage_of", "F", "B", "I", "W", "gpipe", "one_f_one_b", "interleaved_1f1b",
           "zb_h1", "SCHEDULES", "build", "with_comms", "compute_only"]


def gpipe(stages: int, microbatches: int) -> Schedule:
    """All forwards, then all backwards (Huang et al. 2019): m micro-batches of activations alive."""
    _args(stages, microbatches)
    acts = [[F(i) for i in range(microbatches)] + [B(i) for i in range(microbatches)]
            for _ in range(stages)]
    return Schedule("GPipe", stages, microbatches, 1, acts)


def one_f_one_b(stages: int, microbatches: int) -> Schedule:
    """1F1B (PipeDream-flush, Narayanan et al. 2021): at most p - r micro-batches alive on rank r."""
    _args(stages, microbatches)
    p, m = stages, microbatches
    acts = []
    for r in range(p):
        warm = min(p - 1 - r, m)
        a = [F(i) for i in range(warm)]                              # warm-up
        for i in range(m - warm):                                    # steady state: one F, one B
            a += [F(warm + i), B(i)]
        a += [B(i) for i in range(m - warm, m)]                      # cool-down
        acts.append(a)
    return Schedule("1F1B", p, m, 1, acts)


def interleaved_1f1b(stages: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2): v chunks per rank, micro-batches go
    round in groups of p; the bubble shrinks to (p-1)/(v*m + p-1). Needs m a multiple of p."""
    _args(stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
    if m % p:
        raise ValueError(f"interleaved 1F1B sends micro-batches round in groups of p: microbatches "
                         f"({m}) must be a multiple of stages ({p})")
    total = m * v

    def fwd(k):        # k-th forward on a rank: chunk goes up every p micro-batches
        return F((k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k):        # backwards visit the chunks in reverse
        return B((k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    acts = []
    for r in range(p):
        warm = min((p - r - 1) * 2 + (v - 1) * p, total)
        a = [fwd(k) for k in range(warm)]
        for k in range(total - warm):
            a += [fwd(warm + k), bwd(k)]
        a += [bwd(k) for k in range(total - warm, total)]
        acts.append(a)
    return Schedule(f"interleaved 1F1B (v={v})", p, m, v, acts)


def zb_h1(stages: int, microbatches: int) -> Schedule:
    """ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024, arXiv 2401.10241):
    1F1B with each backward split into I (input gradient, on the critical path) and W (weight
    gradient, needed only by the optimizer). Rank r holds back up to r W's (the last stage the most, the first none) and
    runs them at the end, where 1F1B would leave it idle while the earlier stages finish their
    backwards; the bubble falls to about a third of 1F1B's when F = I = W. Every rank then
    holds at most p micro-batches of activations, 1F1B's first stage's peak."""
    _args(stages, microbatches)
    p, m = stages, microbatches
    acts = []
    for r in range(p):
        warm, hold = min(p - 1 - r, m), r
        a, pending = [F(i) for i in range(warm)], []

        def backward(i):
            a.append(I(i))
            pending.append(i)
            if len(pending) > hold:
                a.append(W(pending.pop(0)))

        for i in range(m - warm):
            a.append(F(warm + i))
            backward(i)
        for i in range(m - warm, m):
            backward(i)
        a += [W(i) for i in pending]
        acts.append(a)
    return Schedule("ZB-H1", p, m, 1, acts)


SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b, "interleaved": interleaved_1f1b, "zb-h1": zb_h1}


V_SCHEDULES = ("zb-v", "dualpipe-v", "dualpipe")      # labkit.pipeline.schedules_v: two chunks per rank in a V


def build(name: str, stages: int, microbatches: int, chunks: int = 2) -> Schedule:
    """A schedule by name: 'gpipe', '1f1b', 'interleaved' (uses chunks), 'zb-h1', 'zb-v',
    'dualpipe-v' or 'dualpipe' (these three always hold 2 chunks per rank)."""
    key = name.lower().replace("_", "-").replace("zbh1", "zb-h1").replace("zbv", "zb-v")
    key = key.replace("dualpipev", "dualpipe-v")
    if key in V_SCHEDULES:
        return {"zb-v": schedules_v.zb_v, "dualpipe-v": schedules_v.dualpipe_v,
                "dualpipe": schedules_v.dualpipe}[key](stages, microbatches)
    if key not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of {sorted(SCHEDULES) + list(V_SCHEDULES)}")
    if key == "interleaved":
        return interleaved_1f1b(stages, microbatches, chunks)
    return SCHEDULES[key](stages, microbatches)


def compute_only(schedule: Schedule) -> Schedule:
    """The same schedule without its explicit SEND/RECV steps."""
    return Schedule(schedule.name, schedule.stages, schedule.microbatches, schedule.chunks,
                    [[a for a in acts if a.is_compute] for acts in schedule.actions], schedule.layout)


def with_comms(schedule: Schedule) -> Schedule:
    """Add explicit point-to-point steps: a SEND right after the compute that produces a tensor
    for another rank, a RECV right before the compute that needs one (torch's pipelining does
    the same lowering). Run `validate(..., blocking_sends=True)` on the result to see why, on
    gloo, a send must be posted together with its matching receive."""
    s = compute_only(schedule)
    out = []
    last = s.virtual_stages - 1
    for r, acts in enumerate(s.actions):
        lowered = []
        for a in acts:
            vs = s.vstage(r, a.chunk)
            if a.kind == "F" and vs > 0 and s.place(vs - 1, a.chunk)[0] != r:
                lowered.append(Action("RECV_F", a.mb, a.chunk))
            if a.kind in ("B", "I") and vs < last and s.place(vs + 1, a.chunk)[0] != r:
                lowered.append(Action("RECV_B", a.mb, a.chunk))
            lowered.append(a)
            if a.kind == "F" and vs < last and s.place(vs + 1, a.chunk)[0] != r:
                lowered.append(Action("SEND_F", a.mb, a.chunk))
            if a.kind in ("B", "I") and vs > 0 and s.place(vs - 1, a.chunk)[0] != r:
                lowered.append(Action("SEND_B", a.mb, a.chunk))
        out.append(lowered)
    return Schedule(s.name + " (with sends/receives)", s.stages, s.microbatches, s.chunks, out, s.layout)
