"""ZB-H1's split backward (labkit.pipeline.backward): I + W gives the fused backward's gradients
and does the fused backward's work, no more (counted, not timed). One process, no ranks."""
import pytest
import torch
from torch import nn

from labkit.pipeline.backward import backward_input, backward_weight
from labkit.pipeline.backward_cost import backward_cost
from labkit.pipeline.toy_mlp import mlp


def _fused(model, x, g):
    x = x.detach().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    torch.autograd.backward(model(x), g, inputs=[q for q in model.parameters() if q.requires_grad] + [x])
    return [None if q.grad is None else q.grad.clone() for q in model.parameters()], x.grad.clone()


def _split(model, x, g, twice=1):
    """I then W, `twice` micro-batches accumulated (as the executor does)."""
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    for _ in range(twice):
        weights = [q for q in model.parameters() if q.requires_grad]
        kept = backward_input(model(x), g, x, weights)
        backward_weight(kept)
    return [None if q.grad is None else q.grad.clone() for q in model.parameters()], x.grad.clone()


class Tied(nn.Module):
    """One Linear used twice, one use above the other: its weights join the activation path at
    two nodes, and W must not let the upper node's gradient flow into the lower one again."""

    def __init__(self, width=8):
        super().__init__()
        self.lin, self.mid = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.lin(torch.tanh(self.mid(torch.tanh(self.lin(x))))))


@pytest.mark.parametrize("frozen", [1, None])
def test_split_equals_fused(frozen):
    model = mlp(4, 16, frozen=frozen)
    x, g = torch.randn(5, 16), torch.randn(5, 16)
    (gw, gx), (sw, sx) = _fused(model, x, g), _split(model, x, g)
    assert torch.allclose(gx, sx, atol=1e-6)
    for a, b in zip(gw, sw):
        assert (a is None and b is None) or torch.allclose(a, b, atol=1e-6)
    assert sum(a is None for a in sw) == (2 if frozen is not None else 0)
    sw2, _ = _split(model, x, g, twice=2)                  # W accumulates like a fused backward
    assert all(a is None or torch.allclose(2 * a, b, atol=1e-6) for a, b in zip(sw, sw2))


def test_split_with_a_weight_used_twice():
    torch.manual_seed(0)
    model = Tied()
    x, g = torch.randn(3, 8), torch.randn(3, 8)
    (gw, gx), (sw, sx) = _fused(model, x, g), _split(model, x, g)
    assert torch.allclose(gx, sx, atol=1e-6)
    for a, b in zip(gw, sw):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


def test_w_computes_no_activation_gradient_again():
    c = backward_cost(layers=4, width=32, rows=8, runs=1, repeats=1)
    rows, width, layers = 8, 32, 4
    mm = 2 * rows * width * width                           # one matrix product of the stage
    assert c["max_grad_diff"] < 1e-6
    assert c["B"]["flops"] == 2 * layers * mm                # input and weight gradient per layer
    assert c["I + W"]["flops"] == c["B"]["flops"]            # the split does B's work, no more
    assert c["I + W, naive W"]["flops"] == c["B"]["flops"] + (layers - 1) * mm   # chain again
    assert c["B"]["nodes"] == 4 * layers                      # add, tanh, addmm, t per block
    assert c["I + W"]["nodes"] == 3 * layers + 2 * layers     # I: add, tanh, addmm; W: addmm, t
    assert c["I + W, naive W"]["nodes"] == 3 * layers + 4 * layers
    assert (c["B"]["calls"], c["I + W"]["calls"], c["I + W, naive W"]["calls"]) == (1, 1 + layers, 2)
    assert len(c["ratio"]["runs"]) == 1 and c["ratio"]["min"] > 0
