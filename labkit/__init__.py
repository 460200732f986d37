"""labkit: a Jupyter teaching lab for distributed training.

    import labkit
    cluster = labkit.Cluster(world_size=4)      # real torch.distributed ranks
    cluster.run(fn)                             # -> [result of rank 0, rank 1, ...]

Importing labkit imports nothing else: the runtime (processes, sockets, cloudpickle) loads on
first use of `labkit.Cluster` and friends, torch on first use of a module that needs it, so the
pure modules (`labkit.memory.formulas`, `labkit.comm.formulas`, ...) import on their own.
The layers are described in docs/architecture.md.
"""
from labkit._lazy import lazy

__version__ = "0.1.0"

# public name -> the runtime module that defines it (loaded on first use)
_RUNTIME = {
    "Cluster": "cluster", "close_all": "cluster", "Event": "collect",
    "RankError": "errors", "RankTimeout": "errors",
    "backend": "context", "device": "context", "emit": "context", "in_cluster": "context",
    "init_process_group": "context", "local_rank": "context", "rank": "context",
    "world_size": "context",
}


# the language of what labkit prints and draws (LABKIT_LANG; labkit.i18n)
_OTHER = {"set_lang": "i18n.lang"}

__all__ = [*_RUNTIME, *_OTHER, "load_ipython_extension"]

# `labkit.Cluster`, `labkit.check`, ... import on first use, so `import labkit` stays light;
# the subpackages (check, memory, zero, ...) are found on disk: a new one needs no registration
__getattr__, __dir__ = lazy(__name__, {**{k: f"runtime.{v}" for k, v in _RUNTIME.items()}, **_OTHER},
                            on_disk=True)
del lazy                                     # not a name of labkit's


def load_ipython_extension(ip) -> None:
    """``%load_ext labkit`` registers the ``%%ranks`` cell magic."""
    from labkit.runtime.magic import load_ipython_extension as _load
    _load(ip)


def _start_the_zygote_early() -> None:
    """In a notebook's kernel, `import labkit` starts the learner's zygote in the background (if
    none runs): its `import torch` overlaps the kernel's own (runtime/local/userzygote.py). The
    modules it uses are imported here, on the kernel's thread (about 0.1 s): imported on the
    background thread, they raced the cell's own imports of labkit.i18n, and the loser saw a
    partially initialized module (ImportError: cannot import name 'N_', seen in CI)."""
    from labkit.runtime import stacks  # noqa: F401 - imported before the thread starts (above)
    from labkit.runtime.local import procs, zygote  # noqa: F401
    from labkit.runtime.local.userzygote import prestart
    __import__("threading").Thread(target=prestart, daemon=True, name="labkit-zygote-start").start()


if "ipykernel" in __import__("sys").modules:
    _start_the_zygote_early()
