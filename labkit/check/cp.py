"""Checker for notebook 12 (context parallelism): the learner's online-softmax merge.

`online_softmax_merge(fn)`: fn(o_a, lse_a, o_b, lse_b) -> (o, lse) merges two partial attention
results on disjoint blocks of keys (o: (batch, heads, queries, head_dim), lse: the log-sum-exp of
each query row's scores on its block, (batch, heads, queries)) into the result on both blocks.

First in this process, on small examples whose answer is known: the two halves of one softmax,
one block a query row cannot see (lse = -inf, o = 0), and scores large enough (log-sum-exp ~ 120)
that exp() overflows fp32 unless the larger log-sum-exp is subtracted first. A wrong answer is
matched against the usual mistakes, each with its diagnosis (missing rescale, average of the
two, overflow, the wrong log-sum-exp update, weights swapped, normalised twice, one block
only, ...). A right one then runs inside ring attention on the ranks (causal, zig-zag): the
output and gradients must match one process within 1e-5. Nothing here can hang the ranks.
"""
from labkit.check.core import checker, run_exercise
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr

__all__ = ["online_softmax_merge"]

NAME = "online_softmax_merge"
TOL = 1e-5


def _partials(big: bool = False, masked: bool = False):
    """Two partial results (o, lse) on the two halves of 6 keys, and the full result (causal:
    with `masked` the first query sits at position 2, so it sees none of keys 3..5)."""
    import torch
    from labkit.cp.blocks import attend
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 5, 4, generator=g)
    k = torch.randn(1, 2, 6, 4, generator=g)
    v = torch.randn(1, 2, 6, 4, generator=g)
    if big:                                  # scores ~ 4 x 60 / sqrt(4) = 120: exp overflows fp32
        q = q * 0.05 + 1.0
        k = k * 0.05 + 60.0
    qpos = torch.arange(0, 5) + (2 if masked else 10)
    kpos = torch.arange(0, 6)
    a = attend(q, k[:, :, :3], v[:, :, :3], qpos, kpos[:3], causal=True)
    b = attend(q, k[:, :, 3:], v[:, :, 3:], qpos, kpos[3:], causal=True)
    return a, b, attend(q, k, v, qpos, kpos, causal=True)


def _mistakes():
    """name -> (merge, diagnosis) of the usual wrong merges."""
    import torch

    def w(lse_a, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        return torch.exp(lse_a - lse)[..., None], torch.exp(lse_b - lse)[..., None], lse
    return {
        "no rescale": (lambda oa, la, ob, lb: (oa + ob, torch.logaddexp(la, lb)),
                       tr("o_a + o_b: each partial output is normalised by its own block's sum; "
                          "weight it by exp(lse_a - lse) and exp(lse_b - lse) before adding")),
        "average": (lambda oa, la, ob, lb: ((oa + ob) / 2, torch.logaddexp(la, lb)),
                    tr("the plain average of the two outputs: right only when both blocks have the same "
                       "sum; weight each by exp(lse_x - lse), its block's share of the total")),
        "unnormalised weights": (lambda oa, la, ob, lb: (torch.exp(la)[..., None] * oa + torch.exp(lb)[..., None] * ob,
                                                         torch.logaddexp(la, lb)),
                                 tr("weights exp(lse_a) and exp(lse_b) are the blocks' sums, not their shares: "
                                    "divide by exp(lse) (that is, use exp(lse_a - lse))")),
        "normalised twice": (lambda oa, la, ob, lb: (lambda wa, wb, l: ((wa * oa + wb * ob) / torch.exp(l)[..., None], l))(*w(la, lb)),
                             tr("the merged output is divided by exp(lse) again: exp(lse_a - lse) o_a + "
                                "exp(lse_b - lse) o_b is already normalised")),
        "weights swapped": (lambda oa, la, ob, lb: (lambda wa, wb, l: (wb * oa + wa * ob, l))(*w(la, lb)),
                            tr("the weights are swapped: o_a takes exp(lse_a - lse), o_b takes exp(lse_b - lse)")),
        "weights inverted": (lambda oa, la, ob, lb: (lambda l: (torch.exp(l - la)[..., None] * oa + torch.exp(l - lb)[..., None] * ob, l))(torch.logaddexp(la, lb)),
                             tr("exp(lse - lse_a) is the inverse of the weight: use exp(lse_a - lse)")),
        "one block only": (lambda oa, la, ob, lb: (torch.where((la >= lb)[..., None], oa, ob), torch.maximum(la, lb)),
                           tr("only the block with the larger log-sum-exp is kept; the other block's keys "
                              "are dropped instead of merged with weight exp(lse_x - lse)")),
    }


_LSE_MISTAKES = {
    "max": (lambda la, lb, torch: torch.maximum(la, lb),
            "lse = max(lse_a, lse_b) forgets the smaller block's sum: lse = log(exp(lse_a) + exp(lse_b)) "
            "(torch.logaddexp)"),
    "sum": (lambda la, lb, torch: la + lb,
            "lse = lse_a + lse_b multiplies the two sums; they add: lse = log(exp(lse_a) + exp(lse_b))"),
    "first": (lambda la, lb, torch: la,
              "lse is not updated (lse_a returned): the next block merged gets the wrong weight; "
              "return log(exp(lse_a) + exp(lse_b))"),
    "mean": (lambda la, lb, torch: (la + lb) / 2,
             "lse = mean of the two: lse = log(exp(lse_a) + exp(lse_b)) (torch.logaddexp)"),
}


def _call(fn, a, b):
    try:
        out = fn(a[0].clone(), a[1].clone(), b[0].clone(), b[1].clone())
    except RuntimeError as exc:
        if "must match the size" not in str(exc):
            raise
        raise _Wrong(tr("your merge raised RuntimeError: {error}: o is (batch, heads, queries, head_dim) "
                        "and lse (batch, heads, queries); weights need [..., None] to scale the rows of o",
                        error=str(exc).splitlines()[0])) from None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise _Wrong(tr("return a pair (o, lse); got {kind} of {n}", kind=type(out).__name__, n=len(out))
                     if isinstance(out, (tuple, list)) else
                     tr("return a pair (o, lse); got {kind}", kind=type(out).__name__))
    return out


class _Wrong(Exception):
    pass


def _close(x, y) -> bool:
    import torch
    return x.shape == y.shape and bool(torch.allclose(x, y, rtol=0, atol=TOL, equal_nan=False))


def _judge(fn):
    """None when fn merges right on every example, else the diagnosis."""
    import torch
    for label, kw in ((tr("two halves of one softmax"), {}),
                      (tr("a block some queries cannot see (lse = -inf, o = 0)"), {"masked": True}),
                      (tr("scores near 120 (exp overflows fp32)"), {"big": True})):
        a, b, (o_want, lse_want) = _partials(**kw)
        o, lse = _call(fn, a, b)
        if not (torch.is_tensor(o) and torch.is_tensor(lse)):
            return tr("return tensors (o, lse); got {o}, {lse}", o=type(o).__name__, lse=type(lse).__name__)
        if o.shape != o_want.shape or lse.shape != lse_want.shape:
            return tr("on {label}: o is {o} and lse {lse}; want {o_want} and {lse_want} (weights need "
                      "[..., None] to scale the rows of o)", label=label, o=tuple(o.shape),
                      lse=tuple(lse.shape), o_want=tuple(o_want.shape), lse_want=tuple(lse_want.shape))
        if not bool(torch.isfinite(o).all()) or not bool(torch.isfinite(lse).all()):
            if kw.get("big"):
                return tr("on {label}: inf or nan in the result: exp(lse_a) overflows when the "
                          "scores are large; subtract the larger log-sum-exp first "
                          "(exp(lse_a - lse) with lse = torch.logaddexp(lse_a, lse_b))", label=label)
            return tr("on {label}: inf or nan in the result: a row that sees no key of a block has "
                      "lse = -inf; exp(lse_b - lse) = 0 handles it, (-inf) - (-inf) does not", label=label)
        for name, (wrong, why) in _mistakes().items():
            wo, _ = wrong(*a, *b)
            if torch.isfinite(wo).all() and _close(o, wo) and not _close(o, o_want):
                return tr("on {label}: {why}", label=label, why=why)
        if not _close(o, o_want):
            err = (o - o_want).abs().max().item()
            return tr("on {label}: o differs from the softmax over both blocks by up to {err:.3g}: "
                      "o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b", label=label, err=err)
        if not _close(lse, lse_want):
            for name, (wrong, why) in _LSE_MISTAKES.items():
                if _close(lse, wrong(a[1], b[1], torch)):
                    return tr("o is right but {why}", why=tr(why))
            return tr("on {label}: o is right but lse differs from log(exp(lse_a) + exp(lse_b)) by up "
                      "to {err:.3g}", label=label, err=(lse - lse_want).abs().max().item())
    return None


def _on_ranks(merge_fn):
    from labkit.cp.parity import attention_parity
    return attention_parity(seq=23, causal=True, method="ring", layout="zigzag", heads=4,
                            kv_heads=2, merge_fn=merge_fn)


@checker(NAME)
def online_softmax_merge(fn, cluster, timeout: float = HANG_LIMIT_S):
    try:
        problem = _judge(fn)
    except _Wrong as exc:
        return False, str(exc)
    except NotImplementedError:
        raise
    except Exception as exc:          # noqa: BLE001 - the learner's code raised on an example
        return False, tr("your merge raised {kind}: {error}", kind=type(exc).__name__, error=exc)
    if problem:
        return False, problem
    res = run_exercise(_on_ranks, fn, cluster=cluster, timeout=timeout)
    worst = max(max(d.values()) for d in res)
    n = len(res)
    if not worst < TOL:
        return False, tr("right on the examples, but ring attention with it on {n} ranks differs from "
                         "one process by {worst:.3g}", n=n, worst=worst)
    return True, tr("ring attention with your merge on {n} ranks (causal, zig-zag, 23 positions) matches "
                    "one process: output and gradients within {tol:g}", n=n, tol=TOL)
