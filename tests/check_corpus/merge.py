"""Answers to notebook 12's exercise: merge(o_a, lse_a, o_b, lse_b) -> (o, lse), the online-softmax
merge of two partial attention results on disjoint key blocks."""
import torch


def right_logaddexp(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (torch.exp(lse_a - lse).unsqueeze(-1) * o_a + torch.exp(lse_b - lse).unsqueeze(-1) * o_b, lse)


def right_max_trick(o_a, lse_a, o_b, lse_b):          # the max subtracted by hand (as Milakov)
    m = torch.maximum(lse_a, lse_b)
    sa, sb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    o = (sa[..., None] * o_a + sb[..., None] * o_b) / (sa + sb)[..., None]
    return o, m + torch.log(sa + sb)


def right_sigmoid(o_a, lse_a, o_b, lse_b):            # ring-flash-attention's form
    o = o_a - torch.sigmoid(lse_b - lse_a)[..., None] * (o_a - o_b)
    return o, lse_a - torch.nn.functional.logsigmoid(lse_a - lse_b)


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


RIGHT = [("logaddexp", right_logaddexp), ("max subtracted by hand", right_max_trick),
         ("sigmoid form", right_sigmoid)]
# (name, fn, words the checker's line must hold, what it does to the ranks)
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("no rescale", no_rescale, "o_a + o_b: each partial output is normalised by its own", "clean"),
    ("average", average, "the plain average of the two outputs", "clean"),
    ("max not subtracted", max_not_subtracted, "overflows when the scores are large; subtract the larger", "clean"),
    ("lse = max", lse_max, "o is right but lse = max(lse_a, lse_b)", "clean"),
    ("lse = sum", lse_sum, "o is right but lse = lse_a + lse_b", "clean"),
    ("lse not updated", lse_not_updated, "lse is not updated (lse_a returned)", "clean"),
    ("normalised twice", normalised_twice, "divided by exp(lse) again", "clean"),
    ("unnormalised weights", unnormalised, "are the blocks' sums, not their shares", "clean"),
    ("weights swapped", swapped, "the weights are swapped", "clean"),
    ("weights inverted", inverted, "is the inverse of the weight", "clean"),
    ("larger block only", larger_block_only, "only the block with the larger log-sum-exp is kept", "clean"),
    ("no unsqueeze", no_unsqueeze, "weights need [..., None]", "clean"),
    ("nan on a masked block", masked_block_nan, "a row that sees no key of a block has lse = -inf", "clean"),
    ("first block only", one_value, "o differs from the softmax over both blocks by up to", "clean"),
]
