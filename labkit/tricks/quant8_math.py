"""Block-wise 8-bit optimizer state, by arithmetic (layer 1: pure, no torch).

Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (arXiv 2110.02861): each of
Adam's moments is cut into blocks of `block` values; a block keeps one fp32 scale (its largest
absolute value) and one byte per value, the index of the nearest entry of a 256-entry code
book after dividing by the scale. The code book is "dynamic" (non-linear): dense near zero,
so that the second moment, which spans many orders of magnitude, keeps its small values.
bitsandbytes uses block 256 for its 8-bit optimizers (absmax1 has ceil(n / 256) entries) and
keeps tensors of fewer than 4096 values in fp32 (`min_8bit_size`); labkit does the same.

Bytes per parameter (one moment): 1 + 4 / block. Adam's two: 2 + 8 / block = 2.03 at block
256, against 8 in fp32: the notes' "4x" (3.94x with the scales). With an fp32 master copy the
optimizer state goes from 4 + 8 = 12 to 4 + 2.03 = 6.03 bytes per parameter: 2x, not 4x.
"""
import math
from labkit.i18n import N_

BLOCK = 256             # values per scale (bitsandbytes' block size for 8-bit optimizer states)
MIN_8BIT_SIZE = 4096    # tensors with fewer values keep fp32 moments (bitsandbytes' default)


def _linspace(a: float, b: float, n: int) -> list:
    return [a + (b - a) * i / (n - 1) for i in range(n)]


def dynamic_map(signed: bool = True, max_exponent_bits: int = 7, total_bits: int = 8) -> list:
    """The 256 code values of dynamic tree quantisation, sorted, in [-1, 1] (signed) or [0, 1].

    The construction of bitsandbytes' `create_dynamic_map`: for each decade 10^-6 .. 10^0 a
    linear grid of fractions in [0.1, 1], twice as many per decade as the one below, plus 0 and
    1. The smallest non-zero magnitude is about 1e-7 of the block's scale."""
    data = []
    non_sign_bits = total_bits - 1
    additional = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed \
            else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1
        edges = _linspace(0.1, 1.0, items)
        means = [(lo + hi) / 2 for lo, hi in zip(edges, edges[1:])]
        scale = 10.0 ** (-(max_exponent_bits - 1) + i)
        data += [scale * m for m in means]
        if signed:
            data += [-scale * m for m in means]
    if additional > 0:
        edges = _linspace(0.1, 1.0, additional + 1)
        means = [(lo + hi) / 2 for lo, hi in zip(edges, edges[1:])]
        scale = 10.0 ** (-(max_exponent_bits - 1) + max_exponent_bits - 1)
        data += [scale * m for m in means] + ([-scale * m for m in means] if signed else [])
    data += [0.0, 1.0]
    data += [0.0] * (2 ** total_bits - len(data))
    if len(data) != 2 ** total_bits:
        raise ValueError(f"a dynamic map of {total_bits} bits has {2 ** total_bits} entries, got {len(data)}")
    return sorted(data)


def n_blocks(numel: int, block: int = BLOCK) -> int:
    """Scales one moment of a tensor of `numel` values needs: ceil(numel / block)."""
    if block < 1 or block != int(block):
        raise ValueError(f"block must be a whole number >= 1, got {block!r}")
    return math.ceil(numel / block)


def moment_bytes(numel: int, block: int = BLOCK, min_size: int = MIN_8BIT_SIZE) -> dict:
    """Bytes of ONE moment of one tensor: {'codes': ..., 'scales': ...} (8-bit) or
    {'fp32': 4 numel} for a tensor below `min_size` values."""
    if numel < min_size:
        return {"codes": 0, "scales": 0, "fp32": 4 * numel}
    return {"codes": numel, "scales": 4 * n_blocks(numel, block), "fp32": 0}


def adam8bit_state_bytes(sizes, block: int = BLOCK, min_size: int = MIN_8BIT_SIZE) -> dict:
    """Exact bytes of an 8-bit Adam's state over tensors of `sizes` values, by category as
    `labkit.memory.measure` files them: momentum (m codes, or fp32 m of small tensors),
    variance (v likewise), other (the fp32 scales of both moments). Counters and the shared
    code books are bookkeeping of the implementation and not included here."""
    out = {"momentum": 0, "variance": 0, "other": 0}
    for n in sizes:
        one = moment_bytes(n, block, min_size)
        for moment in (N_("momentum"), N_("variance")):
            out[moment] += one["codes"] + one["fp32"]
            out["other"] += one["scales"]
    return out


def bytes_per_param(block: int = BLOCK, master: bool = True) -> float:
    """Optimizer bytes per parameter of 8-bit Adam on large tensors: 4 (fp32 master) + 2 x
    (1 + 4 / block). 6.03 at block 256 with a master, 2.03 without (fp32 training, where the
    parameter itself is the master)."""
    return (4 if master else 0) + 2 * (1 + 4 / block)
