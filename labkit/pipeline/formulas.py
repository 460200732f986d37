"""Pipeline bubble formulas (layer 1: pure, no torch, no processes).

Two conventions are in use for the same idle time, and sources mix them up:

- idle over total (the notes, GPipe: Huang et al. 2019):   (p - 1) / (v*m + p - 1)
- idle over ideal (Megatron: Narayanan et al. 2021, sec. 2.2): (p - 1) / (v*m)

For p = 4 stages and m = 8 micro-batches they read 27.3 % and 37.5 %. v is the number of
model chunks per rank (interleaved 1F1B); v = 1 for GPipe and plain 1F1B, which have the
same bubble: 1F1B only reorders the work, it saves memory, not time.
"""

__all__ = ["bubble_ratio", "bubble_over_ideal", "ideal_time", "pipeline_time"]


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
