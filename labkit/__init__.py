"""labkit: a Jupyter teaching lab for distributed training.

    import labkit
    cluster = labkit.Cluster(world_size=4)      # real torch.distributed ranks
    cluster.run(fn)                             # -> [result of rank 0, rank 1, ...]

Importing labkit does not import torch; the layers are described in DESIGN.md.
"""
from labkit.runtime.cluster import Cluster, close_all
from labkit.runtime.collect import Event
from labkit.runtime.context import (backend, device, emit, in_cluster, init_process_group,
                                    local_rank, rank, world_size)
from labkit.runtime.errors import RankError, RankTimeout

__version__ = "0.1.0"

__all__ = ["Cluster", "close_all", "Event", "RankError", "RankTimeout", "rank", "world_size", "local_rank",
           "device", "backend", "emit", "in_cluster", "init_process_group",
           "load_ipython_extension"]


_SUBMODULES = {"check", "show", "models", "exercises", "memory", "comm", "ddp", "bench", "zero"}


def __getattr__(name: str):
    """`labkit.check`, `labkit.show`, ... import on first use, so `import labkit` stays light."""
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"labkit.{name}")
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")


def load_ipython_extension(ip) -> None:
    """``%load_ext labkit`` registers the ``%%ranks`` cell magic."""
    from labkit.runtime.magic import load_ipython_extension as _load
    _load(ip)
