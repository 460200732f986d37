"""The capstone's text: the bytes of a standard-library source file, tokens 0..255.

Every Python has `textwrap.py`; no download. Step k's global batch is the same on every rank
and in the one-process reference: `batch` windows of `seq + 1` bytes at offsets fixed by k.
"""
import functools

import torch

__all__ = ["text_bytes", "global_batch"]


@functools.lru_cache(maxsize=4)
def text_bytes(module: str = "textwrap") -> torch.Tensor:
    """The source file of a standard-library module as a 1-D tensor of byte values (int64)."""
    import importlib
    import inspect
    path = inspect.getsourcefile(importlib.import_module(module))
    with open(path, "rb") as f:
        data = f.read()
    return torch.tensor(list(data), dtype=torch.long)


def global_batch(step: int, batch: int, seq: int, module: str = "textwrap"):
    """(inputs, targets), each (batch, seq): step `step`'s windows, next-byte prediction.
    Window i of step k starts at ((k * batch + i) * 7919 * seq) mod (len - seq - 1): spread over
    the file, deterministic."""
    data = text_bytes(module)
    room = len(data) - seq - 1
    starts = [((step * batch + i) * 7919 * seq) % room for i in range(batch)]
    rows = torch.stack([data[s:s + seq + 1] for s in starts])
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
