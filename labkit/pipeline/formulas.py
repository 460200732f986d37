"""Pipeline bubble formulas (layer 1: pure, no torch, no processes).

Two conventions are in use for the same idle time, and sources mix them up:

- idle over total (the notes, GPipe: Huang et al. 2019):   (p - 1) / (v*m + p - 1)
- idle over ideal (Megatron: Narayanan et al. 2021, sec. 2.2): (p - 1) / (v*m)

For p = 4 stages and m = 8 micro-batches they read 27.3 % and 37.5 %. v is the number of
model chunks per rank (interleaved 1F1B); v = 1 for GPipe and plain 1F1B, which have the
same bubble: 1F1B only reorders the work, it saves memory, not time.
"""

from labkit.i18n import tr      # pure (reads LABKIT_LANG)

__all__ = ["bubble_ratio", "bubble_over_ideal", "ideal_time", "pipeline_time", "interleaved_memory_factor",
           "first_stage_activations", "idle_per_rank", "WEIGHT_COPIES", "grad_tolerance"]


def _check(stages, microbatches, chunks) -> None:
    for name, value in (("stages", stages), ("microbatches", microbatches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(tr("{name} must be a whole number >= 1, got {value!r} (stages={stages!r}, "
                                "microbatches={microbatches!r}, chunks={chunks!r})", name=name, value=value,
                                stages=stages, microbatches=microbatches, chunks=chunks))


def bubble_ratio(stages: int, microbatches: int, chunks: int = 1) -> float:
    """Share of the pipeline's time that stages sit idle: (p-1) / (v*m + p-1).

    Idle over total, the notes' and the GPipe paper's convention, with equal stage times and
    free communication. A stage's work is v*m slots of 1/v the size; the fill and drain
    cost p-1 slots (Narayanan et al. 2021, eq. for the interleaved schedule)."""
    _check(stages, microbatches, chunks)
    p, m, v = stages, microbatches, chunks
    return (p - 1) / (v * m + p - 1)


def bubble_over_ideal(stages: int, microbatches: int, chunks: int = 1) -> float:
    """Bubble time over the ideal (bubble-free) time: (p-1) / (v*m), Megatron's convention
    (Narayanan et al. 2021). Equals r / (1 - r) for r = bubble_ratio(...)."""
    _check(stages, microbatches, chunks)
    return (stages - 1) / (chunks * microbatches)


def ideal_time(microbatches: int, forward: float = 1.0, backward: float = 2.0) -> float:
    """A stage's busy time for one step: m x (forward + backward), in the units given."""
    return microbatches * (forward + backward)


def pipeline_time(stages: int, microbatches: int, forward: float = 1.0, backward: float = 2.0,
                  chunks: int = 1) -> float:
    """Makespan of GPipe / 1F1B / interleaved with equal stages and free sends:
    (v*m + p - 1) x (forward + backward) / v."""
    _check(stages, microbatches, chunks)
    return (chunks * microbatches + stages - 1) * (forward + backward) / chunks


def interleaved_memory_factor(stages: int, chunks: int) -> float:
    """1 + (p-1)/(p*v): the first stage of interleaved 1F1B holds this many times 1F1B's p
    micro-batches of activations (Korthikanti et al. 2022, "Reducing Activation Recomputation
    in Large Transformer Models", sec. 4.2.3). Its warm-up runs (v-1)p + 2(p-1) chunk forwards
    before the first backward, each 1/v of the stage's layers."""
    _check(stages, 1, chunks)
    return 1 + (stages - 1) / (stages * chunks)


def first_stage_activations(name: str, stages: int, microbatches: int, chunks: int = 2) -> float:
    """Peak activations on the first stage, in micro-batches' worth (one micro-batch through all
    of the stage's layers), for m >= p: GPipe m; 1F1B, ZB-H1 and ZB-V p (Qi et al. 2024: ZB-V
    holds 2p chunk sets of half a stage); interleaved p(1 + (p-1)/(pv)); DualPipeV p + 1/2
    (DeepSeek-V3 Table 2: PP + 1 chunk sets for PP = 2p parts; needs m >= 2p); DualPipe p + 1
    (PP + 1 stage sets of 1/p of the model; a DualPipe rank holds two stages, so this unit is
    1F1B's stage, half of the rank's layers)."""
    _check(stages, microbatches, chunks)
    p, m = stages, microbatches
    key = name.lower().replace("_", "-").split(" ")[0]
    if key == "gpipe":
        return float(m)
    if key in ("1f1b", "zb-h1", "zb-v"):
        return float(min(p, m))
    if key == "dualpipe-v":
        return p + 0.5
    if key == "dualpipe":                     # PP + 1 sets of one stage (1/p of the model) each
        return p + 1.0
    if key == "interleaved":
        return min(p * interleaved_memory_factor(p, chunks), float(m))
    raise ValueError(tr("no formula for {name!r}: choose gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipe-v or "
                        "dualpipe", name=name))


def idle_per_rank(name: str, stages: int, forward: float = 1.0, backward: float = 2.0, weight: float = 1.0,
                  overlapped: float = None) -> float:
    """Idle time of a rank over one step, from the papers' tables (m >= 2p, free sends), with
    F = forward, B = backward (the FULL backward: input and weight gradients), W = weight
    (its weight-gradient half), all per chunk:

    - 1F1B      (p-1)(F + B)                    DeepSeek-AI 2024, DeepSeek-V3 Technical Report, Table 2
    - ZB-H1     (p-1)(F + B - 2W)  ("ZB1P")     same table; Qi et al. 2024 write it (p-1)(F + I - W)
    - DualPipeV (p-1)(F&B + B - 3W)             same table, DualPipe's (PP/2-1)(F&B + B - 3W) with its
                PP ranks cut in half onto p = PP/2; F&B is the time of a forward and a backward
                overlapped (`overlapped`, default F + B: one after the other, as here)
    - DualPipe  (p/2-1)(F&B + B - 3W)           same table, p even, F, B, W per stage (a rank holds two)
    - ZB-V      0 between a rank's first and last action when F = I = W (Qi et al. 2024, arXiv
                2401.10241 sec. 6); None for other times (the paper gives no closed form).

    ZB-H1's value holds while W <= I, the paper's setting (a larger W cannot all be deferred)."""
    _check(stages, 1, 1)
    p, f, b, w = stages, forward, backward, weight
    key = name.lower().replace("_", "-").split(" ")[0]
    if key in ("1f1b", "gpipe"):
        return (p - 1) * (f + b)
    if key == "zb-h1":
        return max(0.0, (p - 1) * (f + b - 2 * w))
    if key == "dualpipe-v":
        return (p - 1) * ((f + b if overlapped is None else overlapped) + b - 3 * w)
    if key == "dualpipe":
        return (p / 2 - 1) * ((f + b if overlapped is None else overlapped) + b - 3 * w)
    if key == "zb-v":
        return 0.0 if f == b - w == w else None
    raise ValueError(tr("no idle formula for {name!r}: choose 1f1b, zb-h1, zb-v, dualpipe-v or dualpipe",
                        name=name))


# parameters each rank holds, as a multiple of 1F1B's (1/p of the model): DeepSeek-V3, Table 2
WEIGHT_COPIES = {"gpipe": 1, "1f1b": 1, "interleaved": 1, "zb-h1": 1, "zb-v": 1, "dualpipe-v": 1, "dualpipe": 2}


def grad_tolerance(microbatches: int, layers: int = 8, width: int = 64, microbatch_size: int = 4) -> float:
    """How far the executor's gradients (`run_schedule`'s model: `layers` linear layers of `width`)
    may be from one process's, derived (labkit.numerics.chain_bound), not observed: one forward
    and backward through the layers (each a sum of `width` terms each way) and the weight
    gradients' sums over the rows and the micro-batches, added in another order on the stages.
    Scale 1: above every gradient of this MLP (tests/pipeline/test_pipeline_run.py checks it)."""
    from labkit.numerics import chain_bound
    return chain_bound([width] * (2 * layers) + [microbatch_size * microbatches, microbatches], 1.0)
