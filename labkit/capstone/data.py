"""The capstone's data: byte-level tokens of the Python standard library's own source files
(every machine with Python has them, no download; the same bytes for one Python release).

    tokens = corpus()                  # 1-D uint8-valued int64 tensor
    x, y = batch(cfg, step)            # (cfg.batch, cfg.seq) inputs and next-byte targets
"""
import functools

import torch

FILES = ("textwrap", "heapq", "bisect", "fnmatch", "shlex", "colorsys")   # small, stable modules


@functools.lru_cache(maxsize=1)
def corpus() -> torch.Tensor:
    import importlib
    import inspect
    text = "".join(inspect.getsource(importlib.import_module(m)) for m in FILES)
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


def batch(cfg, step: int):
    """The global batch of optimizer step `step`: cfg.batch windows of cfg.seq + 1 bytes at
    offsets drawn from a CPU generator seeded by (data_seed, step): every rank and the one
    process read the same windows, whatever the layout."""
    data = corpus()
    g = torch.Generator().manual_seed(cfg.data_seed * 100003 + step)
    starts = torch.randint(0, len(data) - cfg.seq - 1, (cfg.batch,), generator=g)
    win = torch.stack([data[s:s + cfg.seq + 1] for s in starts.tolist()])
    return win[:, :-1].contiguous(), win[:, 1:].contiguous()
