"""Checking what a Cluster is asked for, before any process starts."""
import math


def check_world_size(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number of ranks >= 1, got {world_size!r}")
    return world_size


def decide_backend(backend: str, world_size: int, env: dict = None):
    """The backend of local ranks (`gpus.Choice`: the backend and a line for the learner), from
    the GPUs the ranks will see: the notebook's own (``torch.cuda.device_count()`` honours the
    ``CUDA_VISIBLE_DEVICES`` a spawner set), or those named by ``env={"CUDA_VISIBLE_DEVICES": ...}``."""
    import os
    from labkit.runtime import gpus
    if backend not in ("auto", "nccl", "gloo"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    import torch
    mine = os.environ.get(gpus.VAR)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cvd = (env or {}).get(gpus.VAR, mine)
    if torch.version.cuda is None:                 # a CPU build of torch: no GPU whatever is set
        visible = 0
    elif env and gpus.VAR in env:                  # the ranks get their own list
        visible = len(gpus.visible_devices(cvd, count if mine is None else None))
    else:
        visible = count
    return gpus.choose_backend(backend, world_size, visible, cvd)


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
