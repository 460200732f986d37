"""Checkers for notebook 00 (your cluster)."""
from labkit.check.core import caught_verdict, checker, new_token
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr, tr_join, trn

__all__ = ["mean_over_ranks"]

DIFFER = "\x00"          # leads the problem "values differ by ...", which says nothing more
_CASES = [((4,), "float32"), ((3, 5), "float64"), ((7,), "float32"), ((1,), "float32")]


def _close(a, b, bound) -> bool:
    import torch
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=0, atol=bound))


def _bound(t, n) -> float:
    """Derived (labkit.numerics), not tuned: n ranks' values summed in any order and divided by n
    are within 2 gamma_(n+1) sum|t_i| / n <= 2 gamma_(n+1) max|t| of the mean, in t's dtype;
    times n, so that the mistake `expected * n` (a sum, n times larger) is judged alike. A
    collective: every rank calls it."""
    import torch.distributed as dist
    from labkit.numerics import reorder_bound
    top = t.abs().max().reshape(1).clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    return reorder_bound(n + 1, n * top.item(), t.dtype)


def _what_is_wrong(got, t, expected, biggest, n, bound) -> str:
    """Name the mistake behind a wrong result (got) for input t, the mean `expected`."""
    import torch
    if _close(got, t, bound) and not _close(t, expected, bound):
        return tr("returned its own values unchanged: nothing was averaged (all-reduce the tensor "
                  "over the ranks, then divide by the world size)")
    if _close(got, t / n, bound) and not _close(t / n, expected, bound):
        return tr("returned its own values divided by {n}: they were never summed over the ranks "
                  "(dist.reduce leaves the sum on one rank; all_reduce gives it to every rank)", n=n)
    if _close(got, expected * n, bound):
        return tr("the values are exactly {n} x the mean, the sum over ranks: divide by the "
                  "world size ({n})", n=n)
    if _close(got, expected / n, bound):
        return tr("the values are the mean divided by {n} again: divide by the world size once", n=n)
    if _close(got, biggest, bound) and not _close(biggest, expected, bound):
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
        bound = _bound(t, n)
        got, caught = guard.attempt(fn, t.clone())
        if any(guard.settle(token, str(k), caught)):
            return {"raised": caught}
        if got is None:
            rows.append((k, tr("returned None: end your function with `return` and the mean")))
        elif not isinstance(got, torch.Tensor):
            rows.append((k, tr("returned {type}, not a tensor", type=type(got).__name__)))
        elif got.shape != expected.shape:
            shapes = dict(got=tuple(got.shape), want=tuple(expected.shape))
            rows.append((k, tr("shape {got}, expected {want}: the mean over ranks is taken element by "
                               "element, not over the tensor's elements", **shapes)
                         if got.numel() == 1 and expected.numel() > 1 else
                         tr("shape {got}, expected {want}", **shapes)))
        elif not _close(got.to(expected.dtype), expected, bound):
            rows.append((k, _what_is_wrong(got.to(expected.dtype), t, expected, biggest, n, bound)))
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
            problem = tr("{problem}; {ranks} got the mean, so the sum reached only some ranks: "
                         "dist.reduce leaves it on one rank, all_reduce on every rank", problem=problem,
                         ranks=trn("rank {ranks}", "ranks {ranks}", len(right), ranks=tr_join(map(str, right))))
        return False, tr("rank {rank}, case {k} (shape {shape}, {dtype}): {problem}",
                         rank=rank, k=k, shape=shape, dtype=dtype, problem=problem)
    return True, tr("{n} ranks, {cases} tensors of different shapes and dtypes",
                    n=cluster.world_size, cases=len(_CASES))
