"""The notes' items that were only shown, each checked: what TP and PP divide on a rank, ...
(issue 33 section 6). Counts are exact; times are ratios from one run."""
import pytest

pytestmark = pytest.mark.cluster


def test_tp_divides_the_block_flops_and_weights_by_t(cluster4):
    for r in cluster4.run(compute_split_runner):
        assert r["t"] == 4
        assert r["flops"] * 4 == r["one device flops"], r           # exact: integer FLOP counts
        assert r["weights split"] * 4 + r["weights replicated"] == r["one device weights"], r
        assert 0 < r["weights replicated"] < r["weights split"], r  # layer norms, row biases


def test_pp_stage_holds_its_layers_share_of_the_model_state(cluster4):
    for sizes in ([2, 2, 2, 2], [1, 1, 5, 1]):
        res = cluster4.run(stage_memory_runner, sizes)
        whole = res[0]["one process model state"]
        assert sum(r["model state"] for r in res) == whole, (sizes, res)
        for r, k in zip(res, sizes):
            assert r["layers"] == k and r["model state"] * 8 == whole * k, (sizes, r)
            assert r["params"] * 8 == res[0]["one process params"] * k, (sizes, r)


def compute_split_runner():
    from labkit.tp.split import compute_split
    return compute_split()


def stage_memory_runner(sizes):
    from labkit.pipeline.stage_memory import stage_memory
    return stage_memory(sizes=sizes)
