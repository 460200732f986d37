"""Context parallelism: the sequence split over the ranks of a process group, attention computed
across the split (module 12).

    q, k, v = (labkit.cp.shard_sequence(t, dim=2, layout="zigzag") for t in (Q, K, V))
    out = labkit.cp.attention(q, k, v, causal=True, method="ring", layout="zigzag")
    full = labkit.cp.gather_sequence(out, dim=2, layout="zigzag")

layout.py (which positions each rank holds; causal work per rank; pure), formulas.py (bytes on
the wire and score memory; pure), blocks.py (one block's attention, the online-softmax merge,
one block's backward), ring.py (ring attention), allgather.py (Llama 3's all-gather attention),
shard.py (shard / gather and the checks every rank agrees on), api.py (`attention`, the entry point).
"""
from labkit._lazy import lazy

_LAZY = {
    "shard_sequence": "shard", "gather_sequence": "shard",
    "attention": "api", "reference": "api",
    "merge": "blocks", "attend": "blocks",
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy(__name__, _LAZY)
