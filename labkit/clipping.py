"""Deprecated: `labkit.clipping` is now `labkit.nd` (the norm and its bounds: `labkit.nd.clipping`;
the runs against one process: `labkit.nd.parity`; the picture: `labkit.nd.plots`). Every old name
still resolves here, warns once, and goes in the next release."""
import importlib
import warnings

warnings.warn("labkit.clipping is now labkit.nd (clipping, parity, plots); the old name goes in the next release",
              DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    for where in ("labkit.nd.clipping", "labkit.nd.parity", "labkit.nd.plots"):
        module = importlib.import_module(where)
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
