"""Pitfalls of distributed training, each with a detector (notebook 11).

    from labkit import pitfalls
    pitfalls.devices_distinct(device_map)     # -> (ok, "what is wrong and what to do")

- `detectors` (pure): the detectors, judging numbers gathered from the ranks; their names are
  this package's own (`pitfalls.lr_rule(...)`);
- `ranks`: the pitfalls reproduced on the ranks (BatchNorm statistics, seeds, devices), and a
  BatchNorm whose statistics are all-reduced by hand (SyncBatchNorm raises on CPU tensors);
- `checklist`: the notes' convergence checklist, run on the ranks.

(`labkit.doctor`, this package's old name, still imports, with a DeprecationWarning.)
"""
from labkit.pitfalls.detectors import *  # noqa: F401,F403
from labkit.pitfalls.detectors import __all__ as _detectors

__all__ = [*_detectors]
