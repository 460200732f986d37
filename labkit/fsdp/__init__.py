"""FSDP with PyTorch (module 05): FSDP2 applied from outside, measured per rank.

- `strategies` (pure): FULL_SHARD / SHARD_GRAD_OP / NO_SHARD / HYBRID_SHARD as data, their
  FSDP2 form and ZeRO stage, and the bytes each sends per step on NCCL and on gloo;
- `accumulate`: gradient accumulation with and without a reduction per micro-batch (FSDP2, FSDP1);
- `meta_init`: build on the meta device, shard, allocate and initialise only the shards;
- `apply`: `shard(model, wrap=..., strategy=...)` applies fully_shard at a chosen granularity and
  logs every all-gather and reduce-scatter (`comm_log`, `counts`), optionally through labkit's ring.
"""
from labkit._lazy import lazy

_LAZY = {"shard": "apply", "units": "apply", "groups": "apply", "comm_log": "apply",
         "counts": "apply", "WRAPS": "strategies",
         "STRATEGIES": "strategies", "Strategy": "strategies", "Group": "strategies",
         "bytes_per_step": "strategies", "calls_per_step": "strategies",
         "collective_bytes": "strategies"}

__all__ = list(_LAZY)


__getattr__, __dir__ = lazy(__name__, _LAZY, submodules={"apply", "strategies", "runs", "pitfalls", "checkpoint",
                                                     "accumulate", "meta_init", "precision", "prefetch"})
