"""Model-state memory by formula (layer 1: pure arithmetic, no torch, no processes).

Model state = parameters + gradients + optimizer state. For mixed-precision Adam the ZeRO
paper (Rajbhandari et al., arXiv 1910.02054, section 3.1) counts, per parameter,
2 B (fp16 params) + 2 B (fp16 grads) + K = 12 B (fp32 master, m, v): 16 Psi bytes. Sharding
over N data-parallel ranks (section 5, Figure 1):

    ZeRO-0 (DDP)   16 Psi                   ZeRO-2 (+ grads)    2 Psi + 14 Psi / N
    ZeRO-1 (opt)    4 Psi + 12 Psi / N      ZeRO-3 (+ params)  16 Psi / N

The notes' 7B table is ZeRO-0: 14 + 14 + 28 + 28 + 28 = 112 GB.
"""
import math

from labkit.memory.breakdown import GB, Breakdown
from labkit.i18n import N_

# bytes per parameter: (params, grads, fp32 master copy, each optimizer state value)
PRECISIONS = {
    "fp32": (4, 4, 0, 4),     # everything in fp32
    "bf16": (2, 2, 0, 2),     # pure bf16: torch's Adam keeps m, v in the parameter's dtype
    "fp16": (2, 2, 0, 2),     # pure fp16 (same bytes as bf16)
    "mixed": (2, 2, 4, 4),    # 16-bit params/grads + fp32 master and fp32 states (the notes)
}
# optimizer -> (names of its per-parameter state values, bytes per value or None = precision's)
OPTIMIZERS = {
    "sgd": ((), None),
    "momentum": (("momentum",), None),                # SGD with momentum: one buffer
    "adam": ((N_("momentum"), N_("variance")), None),         # m and v
    "adamw": ((N_("momentum"), N_("variance")), None),        # same state as Adam
    "adam8bit": ((N_("momentum"), N_("variance")), 1),        # bitsandbytes: m, v in 1 byte (its per-block
                                                      # fp32 scales, a few % at most, not counted)
}
ZERO_STAGES = (0, 1, 2, 3)


def _choice(name: str, value, valid) -> str:
    key = value.lower() if isinstance(value, str) else value
    if key not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid choices: "
                         + ", ".join(repr(v) for v in valid))
    return key


def _positive(name: str, value, whole: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or (whole and value != int(value)) or math.isinf(value):
        kind = "a whole number >= 1" if whole else "a positive number"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def bytes_per_param(precision: str = "mixed", optimizer: str = "adam") -> dict:
    """Bytes per parameter by category, before any sharding (mixed Adam: 2+2+4+4+4 = 16)."""
    precision = _choice("precision", precision, PRECISIONS)
    optimizer = _choice("optimizer", optimizer, OPTIMIZERS)
    p, g, master, state = PRECISIONS[precision]
    names, override = OPTIMIZERS[optimizer]
    out = {"params": p, "grads": g, "master": master, "momentum": 0, "variance": 0}
    for n in names:
        out[n] = state if override is None else override
    return out


def model_states(n_params: float, *, precision: str = "mixed", optimizer: str = "adam",
                 zero_stage: int = 0, world_size: int = 1, offload: bool = False) -> Breakdown:
    """Bytes of model state held on ONE rank (ZeRO paper, arXiv 1910.02054, section 5).

    n_params    Psi, the number of parameters (a tied weight counts once).
    precision   'fp32' | 'bf16' | 'fp16' | 'mixed' (16-bit params and grads, fp32 master).
    optimizer   'sgd' | 'momentum' | 'adam' | 'adamw' | 'adam8bit'.
    zero_stage  0 (replicated, DDP) | 1 (shard optimizer state) | 2 (+ gradients) | 3 (+ params),
                each sharded over `world_size` data-parallel ranks.
    offload     ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840; DeepSpeed's docs: "offloading
                optimizer and gradient states to CPU memory within ZeRO-2"): the gradients and
                the optimizer state (master, m, v) live in host memory and the update runs on
                the CPU; only the 16-bit parameters stay on the GPU (DeepSpeed's estimator:
                2 Psi on the GPU for ZeRO-2 with offload). Offloaded bytes still count in
                `.total` but not in `.device`.

    model_states(7e9) is the notes' table: params 14 + grads 14 + master 28 + momentum 28 +
    variance 28 = 112 GB; model_states(7.5e9, zero_stage=2, world_size=64).total is 16.64 GB.
    """
    _positive("n_params", n_params)
    _positive("world_size", world_size, whole=True)
    if zero_stage not in ZERO_STAGES or isinstance(zero_stage, bool):
        raise ValueError(f"unknown zero_stage {zero_stage!r}; valid choices: 0, 1, 2, 3 "
                         "(0 = none/DDP, 1 = optimizer state, 2 = + gradients, 3 = + parameters)")
    per = bytes_per_param(precision, optimizer)
    n = int(world_size)
    share = {  # fraction of each category held per rank at this stage
        "params": 1 / n if zero_stage >= 3 else 1,
        "grads": 1 / n if zero_stage >= 2 else 1,
        "master": 1 / n if zero_stage >= 1 else 1,
        "momentum": 1 / n if zero_stage >= 1 else 1,
        "variance": 1 / n if zero_stage >= 1 else 1,
    }
    values = {c: n_params * b * share[c] for c, b in per.items()}
    values = {c: (int(v) if v == int(v) else v) for c, v in values.items()}
    on_host = tuple(c for c in ("grads", "master", "momentum", "variance") if offload and values[c])
    label = (f"{_short(n_params)} {precision} {optimizer} ZeRO-{zero_stage} N={n}"
             + (" offload" if offload else ""))
    return Breakdown(**values, on_host=on_host, label=label)


def _short(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return f"{n:g}"


def weights_bytes(n_params: float, precision: str = "fp16") -> float:
    """Bytes of the weights alone: 70B in FP16 = 70e9 x 2 B = 140 GB (the notes' first line)."""
    _positive("n_params", n_params)
    return n_params * PRECISIONS[_choice("precision", precision, PRECISIONS)][0]


def optimizer_share(precision: str = "mixed", optimizer: str = "adam") -> float:
    """Fraction of model state that is optimizer state: 12/16 = 75 % for mixed Adam (the notes)."""
    b = model_states(1, precision=precision, optimizer=optimizer)
    return b.optimizer / b.model_state


def zero_savings(zero_stage: int, world_size: int, precision: str = "mixed",
                 optimizer: str = "adam") -> float:
    """How many times less model state per rank than plain DDP (ZeRO-0) at this world size."""
    base = model_states(1, precision=precision, optimizer=optimizer)
    return base.model_state / model_states(1, precision=precision, optimizer=optimizer,
                                           zero_stage=zero_stage, world_size=world_size).model_state


def zero_savings_limit(zero_stage: int, precision: str = "mixed", optimizer: str = "adam") -> float:
    """The saving as N -> infinity: 16/4 = 4x (ZeRO-1), 16/2 = 8x (ZeRO-2), unbounded (ZeRO-3)."""
    per = bytes_per_param(precision, optimizer)
    total = sum(per.values())
    kept = {0: total, 1: per["params"] + per["grads"], 2: per["params"], 3: 0}[zero_stage]
    return math.inf if kept == 0 else total / kept


def world_size_for_savings(zero_stage: int, target: float, precision: str = "mixed",
                           optimizer: str = "adam") -> int:
    """Smallest N at which ZeRO saves at least `target` x (e.g. 3.6x, 90 % of ZeRO-1's 4x).

    Raises ValueError if the target is at or beyond the stage's limit (never reached).
    """
    limit = zero_savings_limit(zero_stage, precision, optimizer)
    if target >= limit:
        raise ValueError(f"ZeRO-{zero_stage} never saves {target}x: it tends to {limit:g}x "
                         "as the world size grows; ask for less than the limit")
    n = 1
    while zero_savings(zero_stage, n, precision, optimizer) < target:
        n += 1
    return n


def zero_table(n_params: float, world_size: int, precision: str = "mixed",
               optimizer: str = "adam") -> dict:
    """Bytes per rank for ZeRO stages 0..3 (the ZeRO paper's Figure 1 / Table 1 row)."""
    return {s: model_states(n_params, precision=precision, optimizer=optimizer, zero_stage=s,
                            world_size=world_size).model_state for s in ZERO_STAGES}


# DeepSpeed changed its ZeRO-2 estimator in 0.14.3 (PR #5099, commit f4cb866, June 2024).
DEEPSPEED_ZERO2_CHANGE = (0, 14, 3)


def _version(v) -> tuple:
    if v in (None, "current", "latest"):
        return (99,)
    if isinstance(v, tuple):
        return v
    try:
        return tuple(int(x) for x in str(v).lstrip("v").split(".")[:3])
    except ValueError:
        raise ValueError(f"version must look like '0.14.2' (or 'current'), got {v!r}") from None


def deepspeed_estimate(n_params: float, zero_stage: int, world_size: int,
                       largest_layer_params: float = 0, offload: bool = False,
                       version: str = "current") -> float:
    """GPU bytes per rank by DeepSpeed's estimators (not the paper's formulas), for comparison.

    ZeRO-2, `estimate_zero2_model_states_mem_needs` in deepspeed/runtime/zero/stage_1_and_2.py:
        DeepSpeed >= 0.14.3   2 Psi + 18 Psi / N     (offload_optimizer: 2 Psi)
        DeepSpeed <  0.14.3   4 Psi + 16 Psi / N     (offload_optimizer: 2 Psi)
      The 0.14.3 change (PR #5099, "was considering 4 bytes per model param, and 4 bytes per
      gradient. fixed it to 2 bytes") comments the new terms: 2 = 16-bit params; 18 = 16-bit
      grads 2 + fp32 grads 4 + fp32 params 4 + fp32 momentum and variance 8. DeepSpeed's docs page
      (docs/code-docs/source/memory.rst) still showed the old 4 Psi + 16 Psi / N and its 15.93 GB
      example in 0.16.4. Against the paper's 2 Psi + 14 Psi / N the current form adds 4 Psi / N:
      the fp32 copy of this rank's gradient shard that the fp32 optimizer step reads.
    ZeRO-3, `estimate_zero3_model_states_mem_needs` in deepspeed/runtime/zero/stage3.py
    (unchanged by 0.14.3):
        4 x largest_layer + 18 Psi / N   (offload_optimizer only: 4 x largest + 2 Psi / N)
      one layer gathered in 16-bit with its 16-bit gradient (2 + 2 bytes per parameter of the
      largest layer), and per rank 18 = 2 (16-bit parameter shard) + 16 (fp32 grads, params, m, v).
    Checked against DeepSpeed's source at v0.16.4-6-g38327e07 (2025-02-21) and a later tree of
    deepspeedai/DeepSpeed (commit 02aa38c, same lines); `version` picks
    the release whose ZeRO-2 formula to use ('0.14.2' gives the old one; default: current).
    """
    _positive("n_params", n_params)
    _positive("world_size", world_size, whole=True)
    n = int(world_size)
    if zero_stage == 2:
        if offload:
            return 2 * n_params
        if _version(version) < DEEPSPEED_ZERO2_CHANGE:
            return 4 * n_params + int(16 * n_params / n)
        return 2 * n_params + int(18 * n_params / n)
    if zero_stage == 3:
        return 4 * largest_layer_params + int((2 if offload else 18) * n_params / n)
    raise ValueError(f"DeepSpeed ships estimators for zero_stage 2 and 3 only, got {zero_stage!r}")


# The ZeRO paper's worked example (section 5 and Figure 1): 7.5B parameters on 64 GPUs.
ZERO_PAPER_EXAMPLE = dict(n_params=7.5e9, world_size=64,
                          gb={0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9})


def zero_paper_example() -> dict:
    """{stage: GB per GPU} computed for the paper's example; compare with ZERO_PAPER_EXAMPLE."""
    t = zero_table(ZERO_PAPER_EXAMPLE["n_params"], ZERO_PAPER_EXAMPLE["world_size"])
    return {s: b / GB for s, b in t.items()}


CUDA_BLOCK = 512     # c10's CUDA caching allocator: kMinBlockSize, every block a multiple of it


def cuda_block_bytes(sizes) -> int:
    """What ``torch.cuda.memory_allocated`` counts for storages of these byte sizes: each rounded
    up to a multiple of 512 bytes (the caching allocator's smallest block; a 0-byte storage
    takes none). Tiny tensors therefore cost 512 B each on a GPU: a 4-byte scalar is a block."""
    return sum(-(-int(s) // CUDA_BLOCK) * CUDA_BLOCK for s in sizes)

