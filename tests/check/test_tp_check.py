"""labkit.check.row_parallel against a corpus of plausible wrong answers, each with its diagnosis."""
import time

import pytest
import torch
import torch.distributed as dist
from torch.distributed import all_reduce, broadcast as bcast     # by name: the checker must see them too

from labkit.check.tp import row_parallel

pytestmark = pytest.mark.cluster   # starts ranks or a subprocess


def _flat(t):
    return t.reshape(-1, t.shape[-1])


class Correct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, group):
        ctx.save_for_backward(x, w)
        y = x @ w.t()
        dist.all_reduce(y, group=group)
        return y + b

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        return gy @ w, _flat(gy).t() @ _flat(x), _flat(gy).sum(0), None


class CorrectFLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, group):
        ctx.save_for_backward(x, w)
        y = torch.nn.functional.linear(x, w).contiguous()
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=group)
        return y + b

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        return gy @ w, torch.einsum("bso,bsi->oi", gy, x), gy.sum(dim=(0, 1)), None


def _variant(forward=None, backward=None):
    fwd = forward or Correct.forward
    bwd = backward or Correct.backward
    return type("Learner", (torch.autograd.Function,),
                {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


def f_no_reduce(ctx, x, w, b, group):
    ctx.save_for_backward(x, w)
    return x @ w.t() + b


def b_reduce_gx(ctx, gy):
    x, w = ctx.saved_tensors
    gx = gy @ w
    dist.all_reduce(gx)
    return gx, _flat(gy).t() @ _flat(x), _flat(gy).sum(0), None


def f_bias_each_rank(ctx, x, w, b, group):
    ctx.save_for_backward(x, w)
    y = x @ w.t() + b
    dist.all_reduce(y, group=group)
    return y


def f_average(ctx, x, w, b, group):
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    dist.all_reduce(y, group=group)
    return y / dist.get_world_size() + b


def f_no_bias(ctx, x, w, b, group):
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    dist.all_reduce(y, group=group)
    return y


def b_reduce_gw(ctx, gy):
    x, w = ctx.saved_tensors
    gw = _flat(gy).t() @ _flat(x)
    dist.all_reduce(gw)
    return gy @ w, gw, _flat(gy).sum(0), None


def b_no_bias_grad(ctx, gy):
    x, w = ctx.saved_tensors
    return gy @ w, _flat(gy).t() @ _flat(x), None, None


def b_bias_grad_divided(ctx, gy):
    x, w = ctx.saved_tensors
    return gy @ w, _flat(gy).t() @ _flat(x), _flat(gy).sum(0) / dist.get_world_size(), None


def b_transposed_gw(ctx, gy):
    x, w = ctx.saved_tensors
    return gy @ w, _flat(x).t() @ _flat(gy), _flat(gy).sum(0), None


def b_wrong_gx(ctx, gy):                       # the batch order lost (x 0.5 is now named 1/2)
    x, w = ctx.saved_tensors
    return (gy @ w).flip(0), _flat(gy).t() @ _flat(x), _flat(gy).sum(0), None


def f_mismatch(ctx, x, w, b, group):         # rank 0 all-reduces, the others broadcast
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    if dist.get_rank() == 0:
        dist.all_reduce(y, group=group)
    else:
        dist.broadcast(y, 0, group=group)
    return y + b


def f_mismatch_by_name(ctx, x, w, b, group):   # the same, the collectives imported by name
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    if dist.get_rank() == 0:
        all_reduce(y, group=group)
    else:
        bcast(y, 0, group=group)
    return y + b


def f_only_rank0_reduces(ctx, x, w, b, group):
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    if dist.get_rank() == 0:
        dist.all_reduce(y, group=group)
    return y + b


def b_mismatch(ctx, gy):                       # a collective on rank 0 only, in backward
    x, w = ctx.saved_tensors
    gw = _flat(gy).t() @ _flat(x)
    if dist.get_rank() == 0:
        dist.all_reduce(gw)
    return gy @ w, gw, _flat(gy).sum(0), None


def f_reduce_twice(ctx, x, w, b, group):       # N x the sum
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    dist.all_reduce(y, group=group)
    dist.all_reduce(y, group=group)
    return y + b


def f_times_world(ctx, x, w, b, group):
    ctx.save_for_backward(x, w)
    y = x @ w.t()
    dist.all_reduce(y, group=group)
    return (y + b) * dist.get_world_size()


def f_average_all(ctx, x, w, b, group):        # 1/N of the output, bias included
    ctx.save_for_backward(x, w)
    y = x @ w.t() + b / dist.get_world_size()
    dist.all_reduce(y, group=group)
    return y / dist.get_world_size()


def b_gx_times_world(ctx, gy):
    x, w = ctx.saved_tensors
    return gy @ w * dist.get_world_size(), _flat(gy).t() @ _flat(x), _flat(gy).sum(0), None


def b_gw_averaged(ctx, gy):
    x, w = ctx.saved_tensors
    return gy @ w, _flat(gy).t() @ _flat(x) / dist.get_world_size(), _flat(gy).sum(0), None


def b_bias_grad_reduced(ctx, gy):
    x, w = ctx.saved_tensors
    gb = _flat(gy).sum(0)
    dist.all_reduce(gb)
    return gy @ w, _flat(gy).t() @ _flat(x), gb, None


class Stub(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, group):
        raise NotImplementedError("exercise: replace this line with your code")

    @staticmethod
    def backward(ctx, gy):
        raise NotImplementedError("exercise: replace this line with your code")


WRONG = [  # (answer, words the verdict must contain)
    (_variant(forward=f_no_reduce, backward=b_reduce_gx), "wrong direction"),
    (_variant(forward=f_no_reduce), "without summing it over ranks"),
    (_variant(forward=f_bias_each_rank), "bias is counted"),
    (_variant(forward=f_average), "not averaged"),
    (_variant(forward=f_no_bias), "bias is missing"),
    (_variant(backward=b_reduce_gx), "input gradient was all-reduced"),
    (_variant(backward=b_reduce_gw), "weight gradient was all-reduced"),
    (_variant(backward=b_no_bias_grad), "no gradient for the bias"),
    (_variant(backward=b_bias_grad_divided), "bias gradient is 0.5x"),
    (_variant(backward=b_transposed_gw), "backward failed"),
    (_variant(backward=b_wrong_gx), "input gradient differs"),
    (_variant(forward=f_mismatch), "1st collective of forward: rank 0 called all_reduce((3, 5, 6) "
                                   "float64); rank 1 called broadcast((3, 5, 6) float64)"),
    (_variant(forward=f_mismatch_by_name), "1st collective of forward: rank 0 called all_reduce((3, 5, 6) "
                                           "float64); rank 1 called broadcast((3, 5, 6) float64)"),
    (_variant(forward=f_only_rank0_reduces), "rank 0 called all_reduce((3, 5, 6) float64); "
                                             "rank 1 returned from forward"),
    (_variant(backward=b_mismatch), "1st collective of backward: rank 0 called all_reduce((6, 8) "
                                    "float64); rank 1 returned from backward"),
    (_variant(forward=f_reduce_twice), "summed product (before the bias, which is right) is 2x the "
                                       "right one (2 = the number of ranks"),
    (_variant(forward=f_times_world), "the output is 2x the right one (2 = the number of ranks"),
    (_variant(forward=f_average_all), "the output is 1/2 of the right one"),
    (_variant(backward=b_gx_times_world), "input gradient is 2x the right one (2 = the number of ranks"),
    (_variant(backward=b_gw_averaged), "weight gradient is 0.5x the right one (1/2, one over the number"),
    (_variant(backward=b_bias_grad_reduced), "bias gradient is 2x the right one (2 = the number of ranks"),
]


@pytest.fixture(scope="module")
def warm2(cluster2):
    """One correct run first: the ranks' first call pays for imports, not the verdict."""
    row_parallel(Correct, cluster=cluster2)
    return cluster2


@pytest.mark.parametrize("answer,why", WRONG, ids=[w for _, w in WRONG])
def test_wrong_answers_get_their_diagnosis(warm2, capsys, answer, why):
    capsys.readouterr()
    t = time.perf_counter()
    assert row_parallel(answer, cluster=warm2) is False
    took = time.perf_counter() - t
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("row_parallel: FAIL") and why in line, line
    assert took < 5, took


def test_mismatch_on_four_ranks_names_each_call(cluster4, capsys):
    """Ranks grouped by what they called; the ranks are kept (no hang, no abort)."""
    assert row_parallel(_variant(forward=f_mismatch), cluster=cluster4) is False
    line = capsys.readouterr().out
    assert "rank 0 called all_reduce((3, 5, 6) float64); ranks 1, 2, 3 called broadcast(" in line, line
    assert row_parallel(Correct, cluster=cluster4) is True


@pytest.mark.parametrize("answer", [Correct, CorrectFLinear], ids=["matmul", "F.linear"])
def test_correct_answers_pass(cluster, capsys, answer):
    assert row_parallel(answer, cluster=cluster) is True
    assert capsys.readouterr().out.startswith("row_parallel: pass")


def test_stub_is_not_implemented(cluster2, capsys):
    assert row_parallel(Stub, cluster=cluster2) is False
    assert "not implemented yet" in capsys.readouterr().out
