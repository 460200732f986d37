"""CP and EP at full scale on torch's fake process group, against the planner's formulas."""
import pytest

from labkit.memory import model_states
from labkit.plan.fake_moe import MOE
from labkit.plan.fake_scale import fake_scale
from labkit.plan.shapes import MODELS, Hardware
from labkit.plan.planner import evaluate

pytestmark = pytest.mark.cluster   # starts a subprocess


@pytest.fixture(scope="module")
def scale():
    return fake_scale([("7B", 256, 4, 8)], moe=[("Mixtral-8x7B", 64, 8), ("Mixtral-8x7B", 64, 8, 0)])


def test_cp_ranks_share_the_weights_fsdp_shards_over_dp_x_cp(scale):
    r = scale["rows"][0]
    assert (r["tp"], r["cp"], r["dp"]) == (4, 8, 64)             # sharded over dp 8 x cp 8
    assert r["difference"] == 0 and r["measured"] == r["formula"] + r["dp only"] + r["padding"]
    assert r["padding"] / r["measured"] < 0.01


def test_mixtral_experts_over_ep_match_the_planner(scale):
    c = MOE["Mixtral-8x7B"]
    assert c.params == 46_702_792_704 and c.expert_params == 45_097_156_608     # 46.7B, 45.1B
    good, trap = scale["moe"]
    assert good["difference"] == 0 and good["padding"] / good["measured"] < 1e-3
    m = MODELS["Mixtral-8x7B"].with_(params=c.params, expert_params=c.expert_params)
    plan_state = evaluate(m, Hardware(nodes=8), 1, 1, 64, zero_stage=3, ep=8).model_state
    assert good["measured"] == pytest.approx(plan_state, rel=1e-3)
    assert good["gathered experts"] == good["gathered formula"] == 4 * 3 * 4096 * 14336   # 1 expert
    # FSDP2's default dim-0 split of 1 stacked expert over 8 replicas: rank 0 keeps it whole
    assert trap["measured"] > 7 * good["measured"]
    assert trap["measured"] == pytest.approx(model_states(c.params - c.expert_params, zero_stage=3,
                                                          world_size=64).total
                                             + 16 * c.expert_params / 8, rel=1e-3)
