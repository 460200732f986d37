"""Checkers for notebook 00 (your cluster)."""
from labkit.check.core import caught_verdict, checker, new_token
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr

__all__ = ["mean_over_ranks"]

DIFFER = "\x00"          # leads the problem "values differ by ...", which says nothing more
_CASES = [((4,), "float32"), ((3, 5), "float64"), ((7,), "float32"), ((1,), "float32")]


def _close(a, b) -> bool:
    import torch
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-5, atol=1e-6))


def _what_is_wrong(got, t, expected, biggest, n) -> str:
    """Name the mistake behind a wrong result (got) for input t, the mean `expected`."""
    import torch
    if _close(got, t) and not _close(t, expected):
        return tr("returned its own values unchanged: nothing was averaged (all-reduce the tensor "
                  "over the ranks, then divide by the world size)")
    if _close(got, t / n) and not _close(t / n, expected):
        return tr("returned its own values divided by {n}: they were never summed over the ranks "
                  "(dist.reduce leaves the sum on one rank; all_reduce gives it to every rank)", n=n)
    if _close(got, expected * n):
        return tr("the values are exactly {n} x the mean, the sum over ranks: divide by the "
                  "world size ({n})", n=n)
    if _close(got, expected / n):
        return tr("the values are the mean divided by {n} again: divide by the world size once", n=n)
    if _close(got, biggest) and not _close(biggest, expected):
        return tr("the values are the maximum over ranks: sum them (ReduceOp.SUM), then divide")
    nonzero = expected.abs() > 1e-3
    if nonzero.any():
        ratio = got[nonzero] / expected[nonzero]
        c = ratio.flatten()[0].item()
        if torch.allclose(ratio, torch.full_like(ratio, c), rtol=1e-4) and abs(c - 1) > 1e-4:
            return tr("the values are {c:.4g} x the mean: the mean is the sum over ranks divided "
                      "by the world size ({n})", c=c, n=n)
    err = (got - expected).abs().max().item()
    return DIFFER + tr("values differ by up to {err:.3g} from the mean over ranks", err=err)


def _drive_mean(fn, token):
    """On each rank: call the learner's fn on rank-specific tensors, compare with all_reduce.
    Returns [(case, problem or None)], or {"raised": Caught} when fn raised on some rank."""
    import torch
    import torch.distributed as dist
    import labkit
    from labkit.check import guard
    rank, n = labkit.rank(), labkit.world_size()
    rows = []
    for k, (shape, dtype) in enumerate(_CASES):
        g = torch.Generator().manual_seed(1000 * k + rank)
        t = torch.randn(shape, generator=g, dtype=getattr(torch, dtype)).to(labkit.device())
        expected = t.clone()
        dist.all_reduce(expected)
        expected /= n
        biggest = t.clone()
        dist.all_reduce(biggest, op=dist.ReduceOp.MAX)
        got, caught = guard.attempt(fn, t.clone())
        if any(guard.settle(token, str(k), caught)):
            return {"raised": caught}
        if got is None:
            rows.append((k, tr("returned None: end your function with `return` and the mean")))
        elif not isinstance(got, torch.Tensor):
            rows.append((k, tr("returned {type}, not a tensor", type=type(got).__name__)))
        elif got.shape != expected.shape:
            rows.append((k, tr("shape {got}, expected {want}", got=tuple(got.shape), want=tuple(expected.shape)) +
                         (tr(": the mean over ranks is taken element by element, not over the "
                             "tensor's elements") if got.numel() == 1 and expected.numel() > 1 else "")))
        elif not _close(got.to(expected.dtype), expected):
            rows.append((k, _what_is_wrong(got.to(expected.dtype), t, expected, biggest, n)))
        else:
            rows.append((k, None))
    return rows


@checker("mean_over_ranks")
def mean_over_ranks(fn, cluster, timeout: float = HANG_LIMIT_S):
    """fn(t) must return the element-wise mean of t over all ranks, on every rank."""
    results = cluster.run(_drive_mean, fn, new_token(timeout), timeout=timeout)
    if any(isinstance(res, dict) for res in results):
        return False, caught_verdict([res["raised"] for res in results])
    for k, (shape, dtype) in enumerate(_CASES):
        wrong = [(rank, rows[k][1]) for rank, rows in enumerate(results) if rows[k][1]]
        if not wrong:
            continue
        rank, problem = wrong[0]
        right = [r for r, rows in enumerate(results) if not rows[k][1]]
        generic = problem.startswith(DIFFER)
        problem = problem.replace(DIFFER, "", 1)
        if right and generic:
            problem += tr("; {ranks} got the mean, so the sum reached only some ranks: "
                          "dist.reduce leaves it on one rank, all_reduce on every rank",
                          ranks=("ranks " if len(right) > 1 else "rank ") + ", ".join(map(str, right)))
        return False, tr("rank {rank}, case {k} (shape {shape}, {dtype}): {problem}",
                         rank=rank, k=k, shape=shape, dtype=dtype, problem=problem)
    return True, tr("{n} ranks, {cases} tensors of different shapes and dtypes",
                    n=cluster.world_size, cases=len(_CASES))
