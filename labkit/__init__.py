"""labkit: a Jupyter teaching lab for distributed training.

    import labkit
    cluster = labkit.Cluster(world_size=4)      # real torch.distributed ranks
    cluster.run(fn)                             # -> [result of rank 0, rank 1, ...]

Importing labkit imports nothing else: the runtime (processes, sockets, cloudpickle) loads on
first use of `labkit.Cluster` and friends, torch on first use of a module that needs it, so the
pure modules (`labkit.memory.formulas`, `labkit.comm.formulas`, ...) import on their own.
The layers are described in docs/architecture.md.
"""
__version__ = "0.1.0"

# public name -> the runtime module that defines it (loaded on first use)
_RUNTIME = {
    "Cluster": "cluster", "close_all": "cluster", "Event": "collect",
    "RankError": "errors", "RankTimeout": "errors",
    "backend": "context", "device": "context", "emit": "context", "in_cluster": "context",
    "init_process_group": "context", "local_rank": "context", "rank": "context",
    "world_size": "context",
}


__all__ = [*_RUNTIME, "load_ipython_extension"]


def __getattr__(name: str):
    """`labkit.Cluster`, `labkit.check`, ... import on first use, so `import labkit` stays light."""
    import importlib
    if name in _RUNTIME:
        value = getattr(importlib.import_module(f"labkit.runtime.{_RUNTIME[name]}"), name)
        globals()[name] = value                  # later look-ups skip this function
        return value
    if name in _submodules():
        return importlib.import_module(f"labkit.{name}")
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")


def _submodules() -> set:
    """labkit's subpackages and modules (check, memory, zero, ...), found on disk: a new one
    needs no registration here."""
    import pkgutil
    return {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}


def __dir__():
    return sorted([*globals(), *_RUNTIME, *_submodules()])


def load_ipython_extension(ip) -> None:
    """``%load_ext labkit`` registers the ``%%ranks`` cell magic."""
    from labkit.runtime.magic import load_ipython_extension as _load
    _load(ip)
