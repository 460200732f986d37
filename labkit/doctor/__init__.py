"""Pitfalls of distributed training, each with a detector (notebook 11).

    from labkit.doctor import pitfalls
    pitfalls.devices_distinct(device_map)     # -> (ok, "what is wrong and what to do")

- `pitfalls` (pure): the detectors, judging numbers gathered from the ranks;
- `ranks`: the pitfalls reproduced on the ranks (BatchNorm statistics, seeds, devices), and a
  BatchNorm whose statistics are all-reduced by hand (SyncBatchNorm raises on CPU tensors);
- `checklist`: the notes' convergence checklist, run on the ranks.
"""
from labkit.doctor import pitfalls  # noqa: F401

__all__ = ["pitfalls"]
