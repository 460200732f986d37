"""The one-device mixture-of-experts layer and its formulas: no processes."""
import math

import pytest
import torch

from labkit.moe import formulas
from labkit.moe.layer import MoE, capacity_mask


def _moe(k=2, cf=None, experts=4, hidden=8, seed=0):
    torch.manual_seed(seed)
    m = MoE(hidden, 16, experts, k=k, capacity_factor=cf)
    torch.nn.init.normal_(m.router.weight, std=1.0)
    return m


def test_capacity_formula():
    assert formulas.capacity(64, 8, 2, 1.25) == 20          # ceil(1.25 x 2 x 64 / 8)
    assert formulas.capacity(10, 4, 1, 1.0) == 3            # ceil(2.5)
    assert formulas.capacity(10, 4, 1, None) == 10
    assert formulas.capacity_order(2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1)]


@pytest.mark.parametrize("k,cf", [(1, 0.5), (1, 1.0), (2, 0.5), (2, 1.0), (2, 1.25), (3, 0.7)])
def test_capacity_mask_drops_what_the_rule_says(k, cf):
    g = torch.Generator().manual_seed(k)
    skew = torch.tensor([6.0, 2, 1, 1, 1])                   # expert 0 popular: some must wait
    expert = torch.stack([torch.multinomial(skew, k, generator=g) for _ in range(23)])
    want = formulas.kept(expert.tolist(), 5, cf)
    assert capacity_mask(expert, 5, cf).tolist() == want
    assert sum(map(sum, want)) < 23 * k                      # something was dropped


def _by_loop(m, x):
    """Each token on its own: sum over its kept choices of gate x expert(token)."""
    probs = m.router(x).softmax(-1)
    out = torch.zeros_like(x)
    top, idx = probs.topk(m.k, dim=-1)
    keep = formulas.kept(idx.tolist(), m.num_experts, m.capacity_factor)
    for t in range(x.shape[0]):
        g = top[t] if m.k == 1 else top[t] / top[t].sum()
        for j in range(m.k):
            if keep[t][j]:
                out[t] += g[j] * m.experts[int(idx[t, j])](x[t:t + 1])[0]
    return out, keep


@pytest.mark.parametrize("k,cf", [(1, None), (2, None), (1, 0.75), (2, 1.0)])
def test_output_is_gated_sum_of_kept_experts(k, cf):
    m = _moe(k, cf)
    x = torch.randn(19, 8, generator=torch.Generator().manual_seed(3))
    want, keep = _by_loop(m, x)
    y = m(x)
    assert (y - want).abs().max() < 1e-5
    assert m.routing["keep"].tolist() == keep
    kept = sum(map(sum, keep))
    assert m.dropped == 19 * k - kept
    assert m.tokens_per_expert.sum() == kept and m.tokens_per_expert.shape == (4,)


def test_aux_loss_is_switch_formula_and_reaches_router():
    m = _moe(2)
    x = torch.randn(32, 8)
    m(x)
    probs = m.router(x).softmax(-1)
    idx = probs.topk(2, dim=-1).indices
    f = [(idx == e).sum().item() / idx.numel() for e in range(4)]
    want = formulas.aux_loss(f, probs.mean(0).tolist(), 0.01)
    assert math.isclose(m.aux_loss.item(), want, rel_tol=1e-5)
    m.aux_loss.backward()
    assert m.router.weight.grad.abs().sum() > 0
    with torch.no_grad():
        m.router.weight.zero_()                               # uniform probabilities
    m(x)
    assert math.isclose(m.aux_loss.item(), 0.01, rel_tol=1e-6)   # balanced: weight x 1


def test_aux_loss_conventions_differ_as_documented():
    """Megatron-core (labkit's layer) counts all k and divides by k; GShard's top-2 counts first
    choices only; Hugging Face's Mixtral counts all k without dividing: balanced gives k x w."""
    m = _moe(2)
    x = torch.randn(32, 8)
    m(x)
    probs = m.router(x).softmax(-1)
    choices = probs.topk(2, dim=-1).indices.tolist()
    mean = probs.mean(0).tolist()
    got = formulas.aux_loss_conventions(choices, mean, 0.01)
    mega, gshard, hf = (got[c] for c in formulas.AUX_CONVENTIONS)
    assert math.isclose(m.aux_loss.item(), mega, rel_tol=1e-5)
    first = [sum(c[0] == e for c in choices) / 32 for e in range(4)]
    assert math.isclose(gshard, formulas.aux_loss(first, mean, 0.01), rel_tol=1e-12)
    assert math.isclose(hf, 2 * mega, rel_tol=1e-12)
    # each token's two choices on two different experts, every expert equally often, P uniform
    flat = formulas.aux_loss_conventions([[e, (e + 1) % 4] for e in range(4)], [0.25] * 4, 0.01)
    assert [round(flat[c], 12) for c in formulas.AUX_CONVENTIONS] == [0.01, 0.01, 0.02]


def test_top1_gate_is_the_probability():
    m = _moe(1)
    x = torch.randn(6, 8)
    m(x)
    p = m.router(x).softmax(-1).max(-1).values
    assert torch.allclose(m.routing["gate"][:, 0], p)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match=r"k = 5 experts per token, but the layer has 4 experts"):
        MoE(8, 16, 4, k=5)
    with pytest.raises(ValueError, match=r"capacity_factor = 0: it must be > 0"):
        MoE(8, 16, 4, capacity_factor=0)
    with pytest.raises(ValueError, match=r"expected tokens of shape \(tokens, 8\), got \(3, 7\)"):
        MoE(8, 16, 4)(torch.randn(3, 7))


def test_bytes_and_parameter_formulas():
    n, T, h, k = 4, 64, 16, 2
    per_dst = T * k // n                                      # uniform routing
    matrix = [[per_dst] * n for _ in range(n)]
    assert formulas.dispatch_bytes(matrix, 1, h) == formulas.uniform_dispatch_bytes(T, h, k, n)
    assert formulas.combine_bytes(matrix, 1, h) == formulas.uniform_dispatch_bytes(T, h, k, n)
    skew = [[10, 0, 3], [4, 4, 4], [0, 9, 1]]
    assert formulas.dispatch_bytes(skew, 0, 2, 4) == 3 * 2 * 4
    assert formulas.combine_bytes(skew, 0, 2, 4) == 4 * 2 * 4
    m = MoE(h, 24, 8)
    assert sum(p.numel() for p in m.parameters()) == formulas.params_per_rank(h, 24, 8)
    assert formulas.params_per_rank(h, 24, 8, 4) == 2 * formulas.expert_params(h, 24) + h * 8


def test_bias_chooses_the_experts_but_not_the_gates():
    """DeepSeek-V3's balancing: the bias moves the top-k choice; the gate stays the router's
    probability. update_bias lowers an overloaded expert's bias and raises the others'."""
    m = _moe(1).balance_with_bias(0.1)
    x = torch.randn(16, 8)
    m.expert_bias[3] = 10.0                                    # every token now picks expert 3
    y = m(x)
    probs = m.router(x).softmax(-1)
    assert (m.routing["expert"] == 3).all()
    assert torch.allclose(m.routing["gate"][:, 0], probs[:, 3])
    assert torch.allclose(y, m.experts[3](x) * probs[:, 3:4], atol=1e-6)
    m.update_bias(torch.tensor([0, 0, 0, 16]))
    assert m.expert_bias.tolist() == pytest.approx([0.1, 0.1, 0.1, 9.9])
