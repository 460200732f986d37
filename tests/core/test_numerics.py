"""labkit.numerics (the bounds a distributed result is judged by) and labkit.versions (the
tested torch release). The bounds are checked against real float32 arithmetic here: two orders
of one sum, and torch's Adam on two gradients that differ by at most d."""
import io

import pytest
import torch

from labkit import numerics, versions


def test_gamma_is_highams_and_refuses_a_sum_too_long_to_bound():
    u = 2.0 ** -24
    assert numerics.unit_roundoff(torch.float32) == numerics.unit_roundoff("float32") == u
    assert numerics.unit_roundoff("bfloat16") == 2.0 ** -8
    assert numerics.gamma(256) == pytest.approx(256 * u / (1 - 256 * u), rel=1e-12)
    assert numerics.reorder_bound(256, 3.0) == pytest.approx(2 * numerics.gamma(256) * 3.0)
    with pytest.raises(ValueError, match="no error bound"):
        numerics.gamma(2 ** 9, "bfloat16")
    with pytest.raises(ValueError, match="must be one of"):
        numerics.unit_roundoff("int8")


@pytest.mark.parametrize("seed", range(3))
def test_two_orders_of_one_sum_stay_within_reorder_bound(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 1024, generator=g) * torch.rand(4, 1024, generator=g) ** 8   # mixed sizes
    one = sum(v for v in x.flatten().tolist()[::-1])                 # fp64, the exact-ish sum
    seq = torch.zeros(())
    for v in x.flatten():                                            # one process, in order
        seq = seq + v
    split = x.sum(dim=1).sum()                                       # 4 ranks, then the reduce
    bound = numerics.reorder_bound(x.numel(), x.abs().sum().item())
    assert abs(seq.item() - split.item()) <= bound
    assert abs(split.item() - one) <= bound / 2


def _adam_once(p, grad, lr):
    p = p.clone().requires_grad_(True)
    opt = torch.optim.Adam([p], lr=lr)
    p.grad = grad.clone()
    opt.step()
    return p.detach()


def test_adam_step_bound_holds_near_zero_gradients_and_fails_an_unaveraged_one():
    g = torch.Generator().manual_seed(0)
    p = torch.randn(20_000, generator=g)
    grad = torch.randn(20_000, generator=g) * 10.0 ** torch.empty(20_000).uniform_(-10, -1, generator=g)
    d, lr = 1e-9, 1e-2
    other = grad + (torch.rand(20_000, generator=g) * 2 - 1) * d     # any gradient within d
    bound = numerics.adam_step_bound(grad, d, lr, p)
    diff = (_adam_once(p, grad, lr) - _adam_once(p, other, lr)).abs()
    assert (diff <= bound).all(), (diff / bound).max()
    assert diff.max() > 1e-4                  # near-zero gradients did step apart: 1e-5 would fail
    # a gradient summed over 4 ranks instead of averaged, or no step at all: far outside
    assert ((_adam_once(p, 4 * grad, lr) - _adam_once(p, grad, lr)).abs() / bound).max() > 10
    assert ((p - _adam_once(p, grad, lr)).abs() / bound).max() > 1e3


def test_sgd_bound_is_lr_times_the_gradient_error_per_step_plus_rounding():
    assert numerics.sgd_bound(1e-6, 0.5, steps=3, param_scale=2.0) == pytest.approx(
        3 * (0.5e-6 + 2 * 2.0 ** -24 * 2.0))


def _notice(monkeypatch, found):
    monkeypatch.setattr(versions, "installed_torch", lambda: found)
    monkeypatch.setattr(versions, "_said", [])
    out = io.StringIO()
    versions.notice_once(file=out)
    versions.notice_once(file=out)                                   # once per process
    return out.getvalue()


def test_another_torch_release_is_named_once_and_the_tested_one_is_silent(monkeypatch):
    text = _notice(monkeypatch, "2.6.0")
    assert text.count("\n") == 1 and "torch 2.6.0" in text and "torch 2.13.0 only" in text
    assert _notice(monkeypatch, "2.13.0+cpu") == ""
    assert _notice(monkeypatch, None) == ""


def test_the_notice_in_chinese(monkeypatch):
    import labkit
    labkit.set_lang("zh")
    try:
        text = _notice(monkeypatch, "2.6.0")
    finally:
        labkit.set_lang("en")
    assert "本课程只在 torch 2.13.0 上测试过" in text and "torch 2.6.0" in text


def test_a_cluster_says_it_when_it_starts(monkeypatch, capsys):
    import labkit
    monkeypatch.setattr(versions, "installed_torch", lambda: "2.7.1")
    monkeypatch.setattr(versions, "_said", [])
    with labkit.Cluster(1, spares=0):
        pass
    assert "this is torch 2.7.1" in capsys.readouterr().err
