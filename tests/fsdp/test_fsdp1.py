"""The notes' FSDP1 configuration (labkit.fsdp.fsdp1): a full training step on gloo with
device_id=cpu equals one fp32 process within 5 % of the distance the step moved the weights,
each rank holds 1/N of the flat parameters, and without an auto_wrap_policy the whole model is
one unit gathered at once."""
import pytest

from labkit.fsdp import fsdp1


@pytest.mark.parametrize("wrap_blocks", [False, True], ids=["one-unit", "per-block"])
def test_notes_config_full_step(cluster, wrap_blocks):
    n = cluster.world_size
    rs = cluster.run(fsdp1.notes_step, wrap_blocks=wrap_blocks)
    for r in rs:
        assert r["loss_dtype"] == "torch.bfloat16"
        # parity: bf16 step against fp32 one process, SGD (linear in the gradient)
        assert r["moved"] > 0.01, r
        assert r["max_diff"] <= fsdp1.PARITY_FRACTION * r["moved"], r
        # parameters per rank: 1/N of the padded flat parameters, padding under N per unit
        assert r["local_flat"] * n == r["padded_total"], r
        assert 0 <= r["padded_total"] - r["model_params"] < n * r["units"], r
    assert len({r["max_diff"] for r in rs}) == 1          # every rank gathers the same weights
    r = rs[0]
    units = r["unit_bytes_bf16"]
    if not wrap_blocks:
        assert r["units"] == 1
        assert r["peak_gathered"] == units[0] == r["model_bytes_bf16"] + 2 * (r["padded_total"] - r["model_params"])
    else:
        assert r["units"] == 5                            # root + 4 blocks
        root, blocks = units[0], units[1:]
        # the root (kept from forward to backward) + the block in backward + the one prefetched
        assert r["peak_gathered"] == root + 2 * max(blocks)
        assert r["peak_gathered"] < 0.6 * r["model_bytes_bf16"]

