"""Answers to notebook 12's exercise: merge(o_a, lse_a, o_b, lse_b) -> (o, lse), the online-softmax
merge of two partial attention results on disjoint key blocks."""
import torch


def right_logaddexp(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)     # a row that sees neither block
    return (torch.exp(lse_a - safe).unsqueeze(-1) * o_a + torch.exp(lse_b - safe).unsqueeze(-1) * o_b, lse)


def right_max_trick(o_a, lse_a, o_b, lse_b):          # the max subtracted by hand (as Milakov)
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    sa, sb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    total = sa + sb
    o = (sa[..., None] * o_a + sb[..., None] * o_b) / torch.where(total == 0, 1, total)[..., None]
    return o, m + torch.log(total)


def right_sigmoid(o_a, lse_a, o_b, lse_b):            # ring-flash-attention's form, from the larger lse
    hi, lo = torch.maximum(lse_a, lse_b), torch.minimum(lse_a, lse_b)
    seen = torch.isfinite(hi)
    d = torch.where(seen, lse_b - lse_a, torch.zeros_like(hi))
    o = torch.where(seen[..., None], o_a - torch.sigmoid(d)[..., None] * (o_a - o_b), torch.zeros_like(o_a))
    return o, torch.where(seen, hi + torch.nn.functional.softplus(lo - hi), hi)


def right_softmax_stack(o_a, lse_a, o_b, lse_b):      # the two weights as one softmax over blocks
    lse = torch.logaddexp(lse_a, lse_b)
    w = torch.softmax(torch.stack([lse_a, lse_b]), 0).nan_to_num(0.0)     # nan only where both are -inf
    return w[0][..., None] * o_a + w[1][..., None] * o_b, lse


def stub(o_a, lse_a, o_b, lse_b):
    raise NotImplementedError("exercise: replace this line with your code")


def no_rescale(o_a, lse_a, o_b, lse_b):
    return o_a + o_b, torch.logaddexp(lse_a, lse_b)


def average(o_a, lse_a, o_b, lse_b):
    return (o_a + o_b) / 2, torch.logaddexp(lse_a, lse_b)


def max_not_subtracted(o_a, lse_a, o_b, lse_b):       # right maths, overflows in fp32
    sa, sb = torch.exp(lse_a), torch.exp(lse_b)
    return (sa[..., None] * o_a + sb[..., None] * o_b) / (sa + sb)[..., None], torch.log(sa + sb)


def lse_max(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    o = torch.exp(lse_a - lse)[..., None] * o_a + torch.exp(lse_b - lse)[..., None] * o_b
    return o, torch.maximum(lse_a, lse_b)


def lse_sum(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    o = torch.exp(lse_a - lse)[..., None] * o_a + torch.exp(lse_b - lse)[..., None] * o_b
    return o, lse_a + lse_b


def lse_not_updated(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[..., None] * o_a + torch.exp(lse_b - lse)[..., None] * o_b, lse_a


def normalised_twice(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    o = torch.exp(lse_a - lse)[..., None] * o_a + torch.exp(lse_b - lse)[..., None] * o_b
    return o / torch.exp(lse)[..., None], lse


def unnormalised(o_a, lse_a, o_b, lse_b):
    return torch.exp(lse_a)[..., None] * o_a + torch.exp(lse_b)[..., None] * o_b, torch.logaddexp(lse_a, lse_b)


def swapped(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_b - lse)[..., None] * o_a + torch.exp(lse_a - lse)[..., None] * o_b, lse


def inverted(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse - lse_a)[..., None] * o_a + torch.exp(lse - lse_b)[..., None] * o_b, lse


def larger_block_only(o_a, lse_a, o_b, lse_b):
    return torch.where((lse_a >= lse_b)[..., None], o_a, o_b), torch.maximum(lse_a, lse_b)


def no_unsqueeze(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse) * o_a + torch.exp(lse_b - lse) * o_b, lse


def masked_block_nan(o_a, lse_a, o_b, lse_b):          # a block a row cannot see turns into nan
    m = torch.maximum(lse_a, lse_b)
    sa, sb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(sa + sb)
    wa, wb = torch.exp(lse_a - lse), torch.exp(lse_b - lse)
    wb = torch.where(torch.isinf(lse_b), torch.full_like(wb, float("nan")), wb)   # -inf - -inf style
    return wa[..., None] * o_a + wb[..., None] * o_b, lse


def one_value(o_a, lse_a, o_b, lse_b):
    return o_a, lse_a


def textbook_logaddexp(o_a, lse_a, o_b, lse_b):       # nan on a row that sees neither block
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse)[..., None] * o_a + torch.exp(lse_b - lse)[..., None] * o_b, lse


def ring_flash_sigmoid(o_a, lse_a, o_b, lse_b):        # ring-flash-attention's update: assumes lse_a finite
    o = o_a - torch.sigmoid(lse_b - lse_a)[..., None] * (o_a - o_b)
    return o, lse_a - torch.nn.functional.logsigmoid(lse_a - lse_b)


def max_trick_unguarded(o_a, lse_a, o_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    sa, sb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    return (sa[..., None] * o_a + sb[..., None] * o_b) / (sa + sb)[..., None], m + torch.log(sa + sb)


def naive_float64(o_a, lse_a, o_b, lse_b):            # no max subtracted, but in float64: fine to 709
    sa, sb = torch.exp(lse_a.double()), torch.exp(lse_b.double())
    o = (sa[..., None] * o_a.double() + sb[..., None] * o_b.double()) / (sa + sb)[..., None]
    return o.float(), torch.log(sa + sb).float()


def naive_nan_to_num(o_a, lse_a, o_b, lse_b):         # the overflow hidden
    sa, sb = torch.exp(lse_a), torch.exp(lse_b)
    o = (sa[..., None] * o_a + sb[..., None] * o_b) / (sa + sb)[..., None]
    return torch.nan_to_num(o), torch.nan_to_num(torch.log(sa + sb))


def naive_clamped(o_a, lse_a, o_b, lse_b):            # exp kept finite by a clamp
    sa, sb = torch.exp(lse_a.clamp(max=80)), torch.exp(lse_b.clamp(max=80))
    o = (sa[..., None] * o_a + sb[..., None] * o_b) / (sa + sb).clamp(min=1e-30)[..., None]
    return o, torch.log(sa + sb)


def lse_naive_o_stable(o_a, lse_a, o_b, lse_b):       # o right, lse = log(exp + exp) overflows
    lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))
    good = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(good), torch.zeros_like(good), good)
    return torch.exp(lse_a - safe)[..., None] * o_a + torch.exp(lse_b - safe)[..., None] * o_b, lse


def ratio_of_exps(o_a, lse_a, o_b, lse_b):            # the weight as r / (1 + r), r = exp(lse_a - lse_b)
    r = torch.exp(lse_a - lse_b)
    wa = torch.where(torch.isinf(lse_b) & torch.isinf(lse_a), torch.zeros_like(r), r / (1 + r))
    wa = torch.where(torch.isinf(lse_b) & ~torch.isinf(lse_a), torch.ones_like(r), wa)
    lse = lse_b + torch.log1p(r)
    lse = torch.where(torch.isinf(lse_b), lse_a, lse)
    return wa[..., None] * o_a + (1 - wa)[..., None] * o_b, lse


def one_sided_log1p(o_a, lse_a, o_b, lse_b):          # lse = lse_a + log1p(exp(lse_b - lse_a)), b masked only
    lse = torch.where(torch.isinf(lse_b), lse_a, lse_a + torch.log1p(torch.exp(lse_b - lse_a)))
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(lse_a - safe)[..., None] * o_a + torch.exp(lse_b - safe)[..., None] * o_b, lse


def accumulator_assumed_finite(o_a, lse_a, o_b, lse_b):   # o_a as the running result: "always seen"
    wb = torch.exp(lse_b - lse_a)
    o = (o_a + wb[..., None] * o_b) / (1 + wb)[..., None]
    return o, lse_a + torch.log1p(wb)


def softmax_stack(o_a, lse_a, o_b, lse_b):            # nan where both blocks are -inf
    w = torch.softmax(torch.stack([lse_a, lse_b]), 0)
    return w[0][..., None] * o_a + w[1][..., None] * o_b, torch.logsumexp(torch.stack([lse_a, lse_b]), 0)


def half_precision_weights(o_a, lse_a, o_b, lse_b):   # weights rounded to float16
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    wa, wb = torch.exp(lse_a - safe).half().float(), torch.exp(lse_b - safe).half().float()
    return wa[..., None] * o_a + wb[..., None] * o_b, lse


def returns_lse_first(o_a, lse_a, o_b, lse_b):
    o, lse = right_logaddexp(o_a, lse_a, o_b, lse_b)
    return lse, o


def lse_keepdim(o_a, lse_a, o_b, lse_b):
    o, lse = right_logaddexp(o_a, lse_a, o_b, lse_b)
    return o, lse[..., None]


def heads_by_while(o_a, lse_a, o_b, lse_b):           # a loop over heads that walks the wrong way
    heads = o_a.shape[1]
    out, h = [None] * heads, heads - 1
    while h >= 0:
        if h < heads:
            out[h] = right_logaddexp(o_a[:, h:h + 1], lse_a[:, h:h + 1], o_b[:, h:h + 1], lse_b[:, h:h + 1])
        h += 1                                        # meant h -= 1
    return torch.cat([o for o, _ in out], 1), torch.cat([l for _, l in out], 1)


RIGHT = [("logaddexp", right_logaddexp), ("max subtracted by hand", right_max_trick),
         ("sigmoid form", right_sigmoid), ("softmax over the two blocks", right_softmax_stack)]
OVERFLOW = "exp() of a log-sum-exp overflows (float32 above 88, float64 above 709)"
HIDDEN = "something such as torch.nan_to_num or a clamp hid them"
# (name, fn, words the checker's line must hold, what it does to the ranks)
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("no rescale", no_rescale, "o_a + o_b: each partial output is normalised by its own", "clean"),
    ("average", average, "the plain average of the two outputs", "clean"),
    ("max not subtracted", max_not_subtracted, "right once both log-sum-exps are shifted down near 0, wrong at lse = 12", "clean"),
    ("lse = max", lse_max, "o is right but lse = max(lse_a, lse_b)", "clean"),
    ("lse = sum", lse_sum, "o is right but lse = lse_a + lse_b", "clean"),
    ("lse not updated", lse_not_updated, "lse is not updated (lse_a returned)", "clean"),
    ("normalised twice", normalised_twice, "divided by exp(lse) again", "clean"),
    ("unnormalised weights", unnormalised, "are the blocks' sums, not their shares", "clean"),
    ("weights swapped", swapped, "the weights are swapped", "clean"),
    ("weights inverted", inverted, "is the inverse of the weight", "clean"),
    ("larger block only", larger_block_only, "only the block with the larger log-sum-exp is kept", "clean"),
    ("no unsqueeze", no_unsqueeze, "weights need [..., None]", "clean"),
    ("nan on a masked block", masked_block_nan, "a row that sees no key of block b has lse_b = -inf", "clean"),
    ("first block only", one_value, "o differs from the softmax over both blocks by up to", "clean"),
    # issue 33: each passed, or was told the wrong fault, before the checker tried these cases
    ("textbook logaddexp: nan when both blocks are masked", textbook_logaddexp,
     "on a query that sees no key of either block (lse_a = lse_b = -inf): inf or nan in the result: such a row", "clean"),
    ("naive in float64", naive_float64, "scores near 750 (exp overflows float64 too): right once both log-sum-exps are shifted down near 0, wrong at lse = 7", "clean"),
    ("naive wrapped in nan_to_num", naive_nan_to_num, OVERFLOW + " (your result has no inf or nan: " + HIDDEN, "clean"),
    # new wrong answers
    ("ring-flash-attention's update, lse_a assumed finite", ring_flash_sigmoid,
     "on a block some queries cannot see, as block a: inf or nan in the result: a row that sees no key of block a has lse_a = -inf", "clean"),
    ("max trick without a guard", max_trick_unguarded, "a query that sees no key of either block", "clean"),
    ("naive with a clamp", naive_clamped, OVERFLOW + " (your result has no inf or nan: " + HIDDEN, "clean"),
    ("lse by log(exp + exp)", lse_naive_o_stable, OVERFLOW, "clean"),
    ("ratio of exponentials", ratio_of_exps, "with log-sum-exps 11", "clean"),
    ("lse = lse_a + log1p(exp(lse_b - lse_a))", one_sided_log1p, "on a block some queries cannot see, as block a", "clean"),
    ("running result assumed seen", accumulator_assumed_finite, "on a block some queries cannot see, as block a", "clean"),
    ("softmax over the blocks, nan where both are masked", softmax_stack, "a query that sees no key of either block", "clean"),
    ("weights in float16", half_precision_weights, "o differs from the softmax over both blocks by up to", "clean"),
    ("returns (lse, o)", returns_lse_first, "o is (1, 2, 5) and lse (1, 2, 5, 4)", "clean"),
    ("lse keeps a last dim", lse_keepdim, "lse (1, 2, 5, 1)", "clean"),
    ("loop over heads that never ends", heads_by_while, "hung: your function had not returned after 2 s at ", "hang"),
]
