"""Checking what a Cluster is asked for, before any process starts."""
import math


def check_world_size(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number of ranks >= 1, got {world_size!r}")
    return world_size


def resolve_backend(backend: str, world_size: int) -> str:
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        return "nccl" if gpus >= world_size else "gloo"
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"backend='nccl' needs one GPU per rank: world_size={world_size} but this "
                         f"machine has {gpus} GPU(s) visible (torch.cuda.device_count()). Use "
                         f"backend='gloo' (CPU) or world_size<={gpus}.")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    return backend


def seconds(value, name: str, none_ok: bool = True):
    """A positive, finite number of seconds (or None where allowed), else a clear ValueError."""
    if value is None and none_ok:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        allowed = "a positive number of seconds" + (" or None" if none_ok else "")
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def check_env(env) -> dict:
    env = dict(env or {})
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"env= maps names to strings, like {{'TORCH_DISTRIBUTED_DEBUG': "
                            f"'DETAIL'}}; got {k!r}: {v!r}")
    return env
