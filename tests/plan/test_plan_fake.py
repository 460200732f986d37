"""Full scale without hardware: real FSDP2 (+ TP) on torch's fake process group, against the formulas."""
import pytest

from labkit.memory import model_states
from labkit.plan.fake_scale import fake_scale
from labkit.plan.llama import LLAMA

pytestmark = pytest.mark.cluster   # starts ranks or a subprocess


@pytest.fixture(scope="module")
def scale():
    return fake_scale([("7B", 8, 1), ("7B", 64, 1), ("7B", 1024, 1), ("70B", 1024, 8)],
                      step=dict(name="70B", n_layers=1, world_size=64, tp=8, seq=256))


def test_llama_shapes_are_the_published_counts():
    assert LLAMA["7B"].params == 6_738_415_616 and LLAMA["70B"].params == 68_976_648_192


def test_sharded_bytes_equal_the_formula_apart_from_named_terms(scale):
    for r in scale["rows"]:
        assert r["difference"] == 0, r
        assert r["measured"] == r["formula"] + r["dp only"] + r["padding"]
        assert r["optimizer"] == 2 * r["params"] == 2 * r["grads"]      # fp32 m, v; fp32 params, grads
    by = {(r["model"], r["world_size"], r["tp"]): r for r in scale["rows"]}
    assert by[("7B", 8, 1)]["measured"] == model_states(6_738_415_616, zero_stage=3, world_size=8).total
    assert by[("7B", 8, 1)]["padding"] == 0 and by[("7B", 1024, 1)]["padding"] > 0   # 32000 rows / 1024
    assert by[("70B", 1024, 8)]["dp only"] > 0                                      # embeddings not split by TP
    assert by[("7B", 1024, 1)]["padding"] / by[("7B", 1024, 1)]["measured"] < 0.02


def test_tracked_step_has_the_formula_states(scale):
    st = scale["step"]
    assert st["peak"]["Sharded Param"] == pytest.approx(st["formula params"], rel=1e-6)
    assert st["peak"]["OptState"] == pytest.approx(st["formula optimizer"], rel=1e-5)   # + Adam's step scalars
    assert st["peak"]["Total"] > st["peak"]["Sharded Param"] + st["peak"]["OptState"]
