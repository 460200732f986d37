"""Mixture of experts and expert parallelism (module 13).

    from labkit.moe import MoE, expert_parallel, reduce_gradients
    moe = MoE(hidden=64, ffn_hidden=128, experts=8, k=2, capacity_factor=1.25)
    moe = expert_parallel(moe, group)        # experts sharded, tokens routed by all-to-all

layer.py (the one-device layer: router, gates, capacity, auxiliary loss), alltoall.py (torch's
and a hand-written all-to-all, differentiable), parallel.py (expert_parallel, gradient
reduction), formulas.py (pure: capacity, bytes, parameters), parity.py (runs on ranks).
"""
from labkit._lazy import lazy

_LAZY = {
    "MoE": "layer", "Expert": "layer", "route": "layer", "capacity_mask": "layer",
    "expert_parallel": "parallel", "reduce_gradients": "parallel", "ExpertParallelMoE": "parallel",
    "all_to_all": "alltoall", "all_to_all_p2p": "alltoall", "exchange_counts": "alltoall",
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy(__name__, _LAZY, submodules={"formulas", "parity"})
