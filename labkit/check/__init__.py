"""Exercise checkers, one submodule per course module; each prints one deterministic line.

    labkit.check.mean_over_ranks(my_fn)       # -> "mean_over_ranks: pass (...)"

A checker runs the learner's function on the cluster, compares it with labkit's reference
and prints: ``pass``, or what differs and where, or ``not implemented yet`` for a stub
(no exception, so the learner copy of a notebook runs top to bottom). It returns True/False.

Checkers are found by name in the submodules of this package, so each course module adds
its own file (cluster.py, memory.py, comm.py, ddp.py, ...) without editing this one.
"""
import importlib
import pkgutil

from labkit.check.core import report, run_exercise  # noqa: F401


def _submodules():
    for info in pkgutil.iter_modules(__path__):
        if info.name != "core":
            yield importlib.import_module(f"{__name__}.{info.name}")


def __getattr__(name: str):
    for mod in _submodules():
        if name in getattr(mod, "__all__", ()):
            return getattr(mod, name)
    raise AttributeError(f"labkit.check has no checker {name!r}")


def __dir__():
    names = {"report", "run_exercise"}
    for mod in _submodules():
        names.update(getattr(mod, "__all__", ()))
    return sorted(names)
