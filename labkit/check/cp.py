"""Checker for notebook 12 (context parallelism): the learner's online-softmax merge.

`online_softmax_merge(fn)`: fn(o_a, lse_a, o_b, lse_b) -> (o, lse) merges two partial attention
results on disjoint blocks of keys (o: (batch, heads, queries, head_dim), lse: the log-sum-exp of
each query row's scores on its block, (batch, heads, queries)) into the result on both blocks.

First in this process (under the ranks' time limit, `guard.time_limit`: an endless loop is
reported as a hang with its line), on small examples whose answer is known (`_cases`): the two
halves of one softmax; block b, then block a, hidden from some query rows (lse = -inf, o = 0);
scores near 120, where exp() overflows float32; log-sum-exps more than 88 apart, where exp() of
their difference overflows; scores near 750, beyond float64's range too; a row that sees neither
block (o = 0, lse = -inf). The reference is labkit's merge in float64. A wrong answer is matched
against the usual mistakes, each with its diagnosis (missing rescale, average of the two, the
wrong log-sum-exp update, weights swapped, normalised twice, one block only, ...); on the large
cases, where only range can go wrong, it is tried again with both log-sum-exps shifted down:
right there means a log-sum-exp was exponentiated alone (overflow, hidden or not by nan_to_num).
A right one then runs inside ring attention on the ranks (causal, zig-zag): the output and
gradients must match one process within labkit.cp.parity.attention_tolerance (derived). Nothing here can hang the ranks.
"""
from labkit.check.core import checker, run_exercise
from labkit.check.guard import HANG_LIMIT_S, time_limit
from labkit.i18n import N_, tr

__all__ = ["online_softmax_merge"]

NAME = "online_softmax_merge"
TOL = 1e-5


def _partials(big: bool = False, masked: bool = False, blind: bool = False, apart: bool = False,
              huge: bool = False):
    """Two partial results (o, lse) on the two halves of 6 keys, from real attention (float32).
    `masked`: the first query sits at position 2 and sees none of keys 3..5 (block b); `blind`:
    the first query sits at position -1 and sees no key at all (both blocks), the second none of
    block b; `big`: every score ~120 (exp overflows float32); `apart`: block a's scores ~120,
    block b's ~1 (log-sum-exps more than 88 apart: exp of their difference overflows float32);
    `huge`: every score ~750 (exp overflows float64 too)."""
    import torch
    from labkit.cp.blocks import attend
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 2, 5, 4, generator=g)
    k = torch.randn(1, 2, 6, 4, generator=g)
    v = torch.randn(1, 2, 6, 4, generator=g)
    if big or apart or huge:                 # score = q.k / sqrt(4) ~ 4 x 1 x level / 2
        level = 375.0 if huge else 60.0
        q = q * 0.05 + 1.0
        k = k * 0.05 + level
        if apart:
            k[:, :, 3:] = k[:, :, 3:] * 0 + torch.randn(1, 2, 3, 4, generator=g) * 0.3
    qpos = torch.arange(0, 5) + (2 if masked else -1 if blind else 10)
    kpos = torch.arange(0, 6)
    a = attend(q, k[:, :, :3], v[:, :, :3], qpos, kpos[:3], causal=True)
    b = attend(q, k[:, :, 3:], v[:, :, 3:], qpos, kpos[3:], causal=True)
    return a, b, _reference(a, b)


def _reference(a, b):
    """The merge in float64 (labkit's own, which gives a row that sees neither block o = 0 and
    lse = -inf), back in float32."""
    from labkit.cp.blocks import merge
    o, lse = merge(a[0].double(), a[1].double(), b[0].double(), b[1].double())
    return o.float(), lse.float()


def _cases():
    """(label, kind, a, b, (o, lse)) of every example, in the order they are tried."""
    cases = [(tr("two halves of one softmax"), "halves", _partials())]
    a, b, want = _partials(masked=True)
    cases.append((tr("a block some queries cannot see (lse = -inf, o = 0)"), "masked b", (a, b, want)))
    cases.append((tr("scores near 120 (exp overflows fp32)"), "big", _partials(big=True)))
    cases.append((tr("log-sum-exps more than 88 apart (exp of their difference overflows fp32)"), "apart",
                  _partials(apart=True)))
    cases.append((tr("scores near 750 (exp overflows float64 too)"), "huge", _partials(huge=True)))
    cases.append((tr("a block some queries cannot see, as block a"), "masked a", (b, a, want)))
    cases.append((tr("a query that sees no key of either block (lse_a = lse_b = -inf)"), "masked both",
                  _partials(blind=True)))
    return [(label, kind, *parts) for label, kind, parts in cases]


def _tolerances(a, b, want):
    """(atol of o, atol of lse) for a float32 merge against the float64 one. A float32 log-sum-exp
    near L is rounded to within eps L / 2 (eps = 2^-23), and a weight exp(lse_x - lse) inherits
    that error as a relative one; o's rows are convex mixtures of rows of o_a and o_b, so o's
    error is at most |o| times it. Twice that (the inputs were rounded once too), plus TOL for the
    small cases, where float32's rounding of o itself is far below it."""
    import torch
    eps = torch.finfo(torch.float32).eps
    finite = torch.cat([x[torch.isfinite(x)] for x in (a[1], b[1])])
    level = float(finite.abs().max()) if finite.numel() else 0.0
    size = float(torch.cat([a[0].abs().flatten(), b[0].abs().flatten()]).max())
    return TOL + 2 * eps * level * size, TOL + 2 * eps * level


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
            N_("lse = max(lse_a, lse_b) forgets the smaller block's sum: lse = log(exp(lse_a) + exp(lse_b)) "
            "(torch.logaddexp)")),
    "sum": (lambda la, lb, torch: la + lb,
            N_("lse = lse_a + lse_b multiplies the two sums; they add: lse = log(exp(lse_a) + exp(lse_b))")),
    "first": (lambda la, lb, torch: la,
              N_("lse is not updated (lse_a returned): the next block merged gets the wrong weight; "
              "return log(exp(lse_a) + exp(lse_b))")),
    "mean": (lambda la, lb, torch: (la + lb) / 2,
             N_("lse = mean of the two: lse = log(exp(lse_a) + exp(lse_b)) (torch.logaddexp)")),
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


def _close(x, y, atol=TOL) -> bool:
    import torch
    return x.shape == y.shape and bool(torch.allclose(x, y, rtol=0, atol=atol, equal_nan=False))


_MASKED = {"masked b": "b", "masked a": "a"}
_LARGE = ("big", "apart", "huge")


def _judge(fn):
    """None when fn merges right on every example, else the diagnosis."""
    import torch
    for label, kind, a, b, (o_want, lse_want) in _cases():
        o, lse = _call(fn, a, b)
        if not (torch.is_tensor(o) and torch.is_tensor(lse)):
            return tr("return tensors (o, lse); got {o}, {lse}", o=type(o).__name__, lse=type(lse).__name__)
        if o.shape != o_want.shape or lse.shape != lse_want.shape:
            return tr("on {label}: o is {o} and lse {lse}; want {o_want} and {lse_want} (weights need "
                      "[..., None] to scale the rows of o)", label=label, o=tuple(o.shape),
                      lse=tuple(lse.shape), o_want=tuple(o_want.shape), lse_want=tuple(lse_want.shape))
        tol_o, tol_lse = _tolerances(a, b, (o_want, lse_want))
        o, lse = o.detach().float(), lse.detach().float()
        if _close(o, o_want, tol_o) and _close(lse, lse_want, tol_lse):
            continue
        if kind in _LARGE:          # right on the small examples before it: a matter of range
            return _range(fn, label, kind, a, b, o_want, lse_want, o, lse)
        broken = (not bool(torch.isfinite(o).all()) or bool(torch.isnan(lse).any())
                  or bool((torch.isinf(lse) & torch.isfinite(lse_want)).any()))
        if broken:
            if kind == "masked both":
                return tr("on {label}: inf or nan in the result: such a row has lse = -inf too, so "
                          "lse_a - lse is (-inf) - (-inf) = nan; its output must come out 0 and its lse "
                          "-inf: subtract a finite stand-in where lse is -inf (torch.where(torch.isinf(lse), "
                          "0, lse)) or start from the larger lse only where it is finite", label=label)
            return tr("on {label}: inf or nan in the result: a row that sees no key of block {x} has "
                      "lse_{x} = -inf; exp(lse_{x} - lse) = 0 handles it, (-inf) - (-inf) does not",
                      label=label, x=_MASKED.get(kind, "b"))
        for name, (wrong, why) in _mistakes().items():
            wo, _ = wrong(*a, *b)
            if torch.isfinite(wo).all() and _close(o, wo) and not _close(o, o_want):
                return tr("on {label}: {why}", label=label, why=why)
        if not _close(o, o_want, tol_o):
            err = (o - o_want).abs().max().item()
            return tr("on {label}: o differs from the softmax over both blocks by up to {err:.3g}: "
                      "o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b", label=label, err=err)
        for name, (wrong, why) in _LSE_MISTAKES.items():
            if _close(lse, wrong(a[1], b[1], torch)):
                return tr("o is right but {why}", why=tr(why))
        return tr("on {label}: o is right but lse differs from log(exp(lse_a) + exp(lse_b)) by up "
                  "to {err:.3g}", label=label, err=_gap(lse, lse_want))
    return None


def _gap(x, want) -> float:
    """The largest |x - want| where they are not equal (so -inf = -inf is no gap, inf is)."""
    import torch
    same = (x == want)
    d = (x - want).abs()
    d = torch.where(same, torch.zeros_like(d), torch.nan_to_num(d, nan=float("inf")))
    return float(d.max())


def _range(fn, label, kind, a, b, o_want, lse_want, o, lse) -> str:
    """The diagnosis of a merge right on small log-sum-exps and wrong on large ones: tried again
    with both log-sum-exps shifted down by the larger (the same softmax, scores minus a constant,
    so o is unchanged and lse moves by it), it is right when it exponentiated a log-sum-exp alone
    (exp overflows); still wrong on blocks far apart, it exponentiated their difference."""
    import torch
    finite = torch.isfinite
    hid = bool(finite(o).all() and finite(lse).all())     # no inf or nan left: something hid them
    top = torch.maximum(a[1], b[1])
    shift = float(top[finite(top)].max())
    so, slse = _call(fn, (a[0], a[1] - shift), (b[0], b[1] - shift))
    if torch.is_tensor(so) and torch.is_tensor(slse) and so.shape == o_want.shape and slse.shape == lse_want.shape:
        tol_o, tol_lse = _tolerances(a, b, None)     # the reference was rounded at the original level
        if _close(so.detach().float(), o_want, tol_o) and _close(slse.detach().float(), lse_want - shift, tol_lse):
            if hid:
                return tr("on {label}: right once both log-sum-exps are shifted down near 0, wrong at lse "
                          "= {level:.0f}: exp() of a log-sum-exp overflows (float32 above 88, float64 "
                          "above 709) (your result has no inf or nan: something such as "
                          "torch.nan_to_num or a clamp hid them, and the numbers left are wrong); never "
                          "exponentiate a log-sum-exp alone: subtract the larger one first "
                          "(exp(lse_a - lse) with lse = torch.logaddexp(lse_a, lse_b))",
                          label=label, level=shift)
            return tr("on {label}: right once both log-sum-exps are shifted down near 0, wrong at lse = "
                      "{level:.0f}: exp() of a log-sum-exp overflows (float32 above 88, float64 above "
                      "709); never exponentiate a log-sum-exp alone: subtract the larger one first "
                      "(exp(lse_a - lse) with lse = torch.logaddexp(lse_a, lse_b))",
                      label=label, level=shift)
    if kind == "apart":
        gap = float((a[1] - b[1]).abs().min())
        if hid:
            return tr("on {label}: with log-sum-exps {gap:.0f} apart, exp() of their difference overflows "
                      "(float32 above 88) (your result has no inf or nan: something such as "
                      "torch.nan_to_num or a clamp hid them, and the numbers left are wrong): exponentiate "
                      "only differences that are <= 0, such as lse_x - max(lse_a, lse_b) or lse_x - lse",
                      label=label, gap=gap)
        return tr("on {label}: with log-sum-exps {gap:.0f} apart, exp() of their difference overflows "
                  "(float32 above 88): exponentiate only differences that are <= 0, such as "
                  "lse_x - max(lse_a, lse_b) or lse_x - lse", label=label, gap=gap)
    if not _close(o, o_want, _tolerances(a, b, None)[0]):
        return tr("on {label}: o differs from the softmax over both blocks by up to {err:.3g}: "
                  "o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b", label=label, err=_gap(o, o_want))
    return tr("on {label}: o is right but lse differs from log(exp(lse_a) + exp(lse_b)) by up "
              "to {err:.3g}", label=label, err=_gap(lse, lse_want))


def _on_ranks(merge_fn):
    from labkit.cp.parity import attention_parity
    return attention_parity(seq=23, causal=True, method="ring", layout="zigzag", heads=4,
                            kv_heads=2, merge_fn=merge_fn)


@checker(NAME)
def online_softmax_merge(fn, cluster, timeout: float = HANG_LIMIT_S):
    try:
        with time_limit(timeout):       # fn runs here, in the notebook: the ranks' limit for it too
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
    from labkit.cp.parity import attention_tolerance    # derived: chain_bound of the attention's reductions
    tol = attention_tolerance(23, heads=4, kv_heads=2, n=n)
    if not worst <= tol:
        return False, tr("right on the examples, but ring attention with it on {n} ranks differs from "
                         "one process by {worst:.3g}", n=n, worst=worst)
    return True, tr("ring attention with your merge on {n} ranks (causal, zig-zag, 23 positions) matches "
                    "one process: output and gradients within {tol:g}", n=n, tol=tol)
