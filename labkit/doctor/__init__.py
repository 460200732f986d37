"""Deprecated: `labkit.doctor` is now `labkit.pitfalls` (its detectors: `labkit.pitfalls.detectors`,
also importable as `from labkit import pitfalls`). This name warns and goes in the next release."""
from labkit._lazy import moved

__getattr__, __dir__ = moved(__name__, "labkit.pitfalls", {"pitfalls": "labkit.pitfalls.detectors"})
del moved
