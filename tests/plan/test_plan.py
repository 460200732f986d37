"""The planner: known cases with the layout written down, and its numbers against their sources."""
import pytest

from labkit.memory import GB, model_states
from labkit.plan.flops import bubble_ratio, flops_per_token, mfu
from labkit.plan.shapes import MODELS, Hardware, Model
from labkit.plan.planner import USABLE, evaluate, plan

# (model, hardware, expected TP, PP, DP, expected MFU); MFU within +-0.03 of the model's number.
CASES = [
    ("1B", Hardware(gpus_per_node=1), 1, 1, 1, 0.50),                 # fits: nothing to split
    ("7B", Hardware(), 1, 1, 8, 0.48),                                # ZeRO over the node
    ("70B", Hardware(nodes=4), 4, 2, 4, 0.45),                        # TP in node, PP, DP
    ("175B", Hardware(gpu="A100-80GB", nodes=128), 8, 1, 128, 0.47),  # TP 8 + ZeRO-2
]


@pytest.mark.parametrize("name,hw,tp,pp,dp,want_mfu", CASES, ids=[c[0] for c in CASES])
def test_known_cases(name, hw, tp, pp, dp, want_mfu):
    p = plan(MODELS[name], hw)
    assert (p.tp, p.pp, p.dp) == (tp, pp, dp), str(p)
    assert p.chosen.fits and p.chosen.memory <= USABLE * hw.gpu_gb * GB
    assert abs(p.chosen.mfu - want_mfu) < 0.03, p.chosen.mfu
    assert tp * pp * dp == hw.gpus
    branches = [k for k, _ in p.reasons]
    assert branches[0] == "1. one GPU?" and "4. TP inside the node" in branches
    assert all(sentence for _, sentence in p.reasons)


def test_reasons_carry_numbers():
    text = str(plan(MODELS["7B"], Hardware()))
    assert "model state 108 GB" in text and "does not fit" in text and "DDP does not fit" in text
    one = str(plan(MODELS["1B"], Hardware(gpus_per_node=1)))
    assert "fits" in one and "TP 1 x PP 1 x DP 1" in one


def test_model_that_fits_is_replicated_for_throughput():
    small = Model("350M", 0.35e9, 24, 1024, 16, 1024, 64)
    p = plan(small, Hardware())
    assert (p.tp, p.pp, p.dp) == (1, 1, 8) and p.chosen.zero_stage == 0
    assert "practice replicates the model for throughput" in str(p)


def test_slow_network_and_nothing_fits():
    p = plan(MODELS["70B"], Hardware(gpu="RTX4090-24GB", nodes=4))
    assert p.chosen is None and "8-bit" in str(p) and "nothing fits" in str(p)
    p = plan(MODELS["7B"], Hardware(nodes=4, inter_gbps=3))
    assert any(k == "6. hybrid sharding" for k, _ in p.reasons)


def test_memory_and_flops_come_from_the_formulas():
    m, hw = MODELS["7B"], Hardware()
    c = evaluate(m, hw, tp=1, pp=1, dp=8, zero_stage=3, checkpointing="full")
    assert c.model_state == model_states(m.params, zero_stage=3, world_size=8).device
    assert flops_per_token(7e9, 32, 4096, 4096) == 6 * 7e9 + 12 * 32 * 4096 * 4096
    assert bubble_ratio(4, 8) == pytest.approx(3 / 11)
    assert mfu(1e15, 1.0, 2, 1e15) == 0.5
    c = evaluate(m, hw, tp=2, pp=4, dp=1, micro_batch=1)
    assert c.bubble == pytest.approx(bubble_ratio(4, 1024))
    with pytest.raises(ValueError, match="global batch 1024 does not split"):
        evaluate(m, hw, tp=1, pp=1, dp=8, micro_batch=3)
    with pytest.raises(ValueError, match="unknown GPU"):
        Hardware(gpu="B300")


def test_form_renders_headless():
    from labkit.plan.form import form, render
    w = form()
    assert w is not None
    html = render(MODELS["70B"], Hardware(nodes=4))
    assert "TP 4" in html and "<table" in html
