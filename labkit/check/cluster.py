"""Checkers for notebook 00 (your cluster)."""
from labkit.check.core import checker

__all__ = ["mean_over_ranks"]

_CASES = [((4,), "float32"), ((3, 5), "float64"), ((7,), "float32"), ((1,), "float32")]


def _drive_mean(fn):
    """On each rank: call the learner's fn on rank-specific tensors, compare with all_reduce."""
    import torch
    import torch.distributed as dist
    import labkit
    rank, n = labkit.rank(), labkit.world_size()
    rows = []
    for k, (shape, dtype) in enumerate(_CASES):
        g = torch.Generator().manual_seed(1000 * k + rank)
        t = torch.randn(shape, generator=g, dtype=getattr(torch, dtype)).to(labkit.device())
        expected = t.clone()
        dist.all_reduce(expected)
        expected /= n
        got = fn(t.clone())
        if not isinstance(got, torch.Tensor):
            rows.append((k, f"returned {type(got).__name__}, not a tensor"))
        elif got.shape != expected.shape:
            rows.append((k, f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"))
        elif not torch.allclose(got.to(expected.dtype), expected, rtol=1e-5, atol=1e-6):
            err = (got.to(expected.dtype) - expected).abs().max().item()
            rows.append((k, f"values differ by up to {err:.3g} from the mean over ranks"))
        else:
            rows.append((k, None))
    return rows


@checker("mean_over_ranks")
def mean_over_ranks(fn, cluster, timeout: float = 30):
    """fn(t) must return the element-wise mean of t over all ranks, on every rank."""
    results = cluster.run(_drive_mean, fn, timeout=timeout)
    for rank, rows in enumerate(results):
        for k, problem in rows:
            if problem:
                shape, dtype = _CASES[k]
                return False, f"rank {rank}, case {k} (shape {shape}, {dtype}): {problem}"
    return True, f"{cluster.world_size} ranks, {len(_CASES)} tensors of different shapes and dtypes"
