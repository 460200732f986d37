"""Deprecated: `labkit.diagnose` is now `labkit.throughput` (its pictures: `labkit.throughput.plots`).
This name warns and goes in the next release."""
from labkit._lazy import moved

__getattr__, __dir__ = moved(__name__, "labkit.throughput", {"draw": "labkit.throughput.plots"})
del moved
