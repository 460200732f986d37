"""Pipeline bubble formulas (layer 1: pure, no torch, no processes).

Two conventions are in use for the same idle time, and sources mix them up:

- idle over total (the notes, GPipe: Huang et al. 2019):   (p - 1) / (v*m + p - 1)
- idle over ideal (Megatron: Narayanan et al. 2021, sec. 2.2): (p - 1) / (v*m)

For p = 4 stages and m = 8 micro-batches they read 27.3 % and 37.5 %. v is the number of
model chunks per rank (interleaved 1F1B); v = 1 for GPipe and plain 1F1B, which have the
same bubble: 1F1B only reorders the work, it saves memory, not time.
"""

__all__ = ["bubble_ratio", "bubble_over_ideal", "ideal_time", "pipeline_time", "interleaved_memory_factor",
           "first_stage_activations"]


def _check(stages, microbatches, chunks) -> None:
    for name, value in (("stages", stages), ("microbatches", microbatches), ("chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r} "
                             f"(stages={stages!r}, microbatches={microbatches!r}, chunks={chunks!r})")


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
    of the stage's layers), for m >= p: GPipe m; 1F1B and ZB-H1 p; interleaved p(1 + (p-1)/(pv))."""
    _check(stages, microbatches, chunks)
    p, m = stages, microbatches
    key = name.lower().replace("_", "-").split(" ")[0]
    if key == "gpipe":
        return float(m)
    if key in ("1f1b", "zb-h1"):
        return float(min(p, m))
    if key == "interleaved":
        return min(p * interleaved_memory_factor(p, chunks), float(m))
    raise ValueError(f"no formula for {name!r}: choose gpipe, 1f1b, interleaved or zb-h1")
