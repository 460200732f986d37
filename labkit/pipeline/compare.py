"""Every schedule side by side: idle time, bubble, activations and weights per rank (layer 1).

    compare_schedules(4, 8)          # a Table: simulated figures next to the papers' formulas

Times are per rank's layers (one stage of 1F1B): `forward`, `backward` (the input-gradient
half, I) and `weight` (W); a fused B costs I + W. Schedules with two chunks per rank run each
chunk of a V in half those times; DualPipe's chunks are whole stages (a rank holds two, twice
the weights). Activations are counted in one micro-batch through 1/p of the model.
"""
from labkit.i18n import N_, tr
from labkit.pipeline.formulas import WEIGHT_COPIES, first_stage_activations, idle_per_rank
from labkit.pipeline.schedules import build
from labkit.pipeline.simulate import held_in_order, simulate
from labkit.tables import Table

__all__ = ["compare_schedules", "NAMES"]

NAMES = ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe-v", "dualpipe"]


def _idle_formula(name, p, f, i, w, v) -> str:
    if name == "interleaved":
        return f"{(p - 1) * (f + i + w) / v:g}"               # (p-1)(F+B)/v, Narayanan et al. 2021
    if name == "gpipe":
        name = "1f1b"
    k = 0.5 if name in ("zb-v", "dualpipe-v") else 1.0          # the papers' times are per chunk
    x = idle_per_rank(name, p, f * k, (i + w) * k, w * k)
    return "-" if x is None else f"{x:g}"


def compare_schedules(stages: int = 4, microbatches: int = 8, forward: float = 1.0, backward: float = 1.0,
                      weight: float = 1.0) -> Table:
    """Simulated idle time per rank (makespan minus busy), the bubble in both conventions, the
    first rank's peak activations counted from its list, and the weights each rank holds, next
    to the formula for each (labkit.pipeline.formulas says where each comes from)."""
    p, m, f, i, w = stages, microbatches, forward, backward, weight
    rows = []
    for name in NAMES:
        if name == "dualpipe" and p % 2:
            continue                                  # DualPipe pairs rank r with rank p-1-r
        s = build(name, p, m, chunks=2)
        k = 1.0 if s.layout == "dual" else 1.0 / s.chunks
        t = simulate(s, forward=f * k, backward=i * k, weight=w * k)
        held = held_in_order(s)[0] * (2 if s.layout == "dual" else 1)      # in 1/p of the model
        rows.append([s.name, f"{max(t.idle):g}", _idle_formula(name, p, f, i, w, s.chunks),
                     f"{t.bubble:.3f}", f"{t.span_bubble:.3f}", f"{held:g}",
                     f"{first_stage_activations(name, p, m, 2):g}", f"{WEIGHT_COPIES[name]}x"])
    return Table(["schedule", "idle per rank, simulated", "idle, formula", "bubble (idle / total)",
                  "bubble in own span", "rank 0 holds, counted", "rank 0 holds, formula", "weights per rank"],
                 rows, title=tr("p={p} ranks, m={m} micro-batches; per rank's layers F={f:g}, I={i:g}, "
                                "W={w:g} (a chunk of a V: half)", p=p, m=microbatches, f=f, i=i, w=w),
                 notes=[N_("idle formulas: 1F1B and GPipe (p-1)(F+B), interleaved (p-1)(F+B)/v, ZB-H1 (p-1)(F+B-2W), "
                        "DualPipeV (p-1)(F&B+B-3W) with F&B = F+B and F, B, W per chunk (DeepSeek-V3, Table 2), "
                        "DualPipe (p/2-1)(F&B+B-3W) per stage; ZB-V: 0 in its own span when F = I = W (Qi et al. 2024)"),
                        N_("holds: activations at the peak, in units of one micro-batch through 1/p of the model (a "
                        "1F1B stage); weights: parameters per rank against 1F1B's 1/p of the model")])
