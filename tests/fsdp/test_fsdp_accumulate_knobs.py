"""FSDP2 accumulation knobs: collectives per micro-batch against FSDP2's rules, memory held."""
import pytest

from labkit.fsdp.accumulate_knobs import KNOBS, expected_counts


def test_expected_counts_pure():
    assert expected_counts(2, 3, KNOBS[0]) == [{"all_gather": 5, "reduce_scatter": 3}] * 3
    assert [r["reduce_scatter"] for r in expected_counts(2, 3, KNOBS[1])] == [0, 0, 3]
    assert [r["all_gather"] for r in expected_counts(2, 3, KNOBS[2])] == [5, 2, 2]
    with pytest.raises(ValueError, match="knob must be one of"):
        expected_counts(2, 3, "no_sync")


@pytest.mark.cluster
@pytest.mark.parametrize("knob", KNOBS)
def test_counts_and_memory_per_micro_batch(cluster2, knob):
    from labkit.fsdp.accumulate_knobs import knob_run
    for res in cluster2.run(knob_run, knob=knob):
        assert res["err_over_bound"] <= 1, res        # derived: labkit.numerics.one_step_over_bound
        want = expected_counts(res["blocks"], len(res["rows"]), knob)
        assert [{k: r[k] for k in ("all_gather", "reduce_scatter")} for r in res["rows"]] == want, res
        for r in res["rows"][:-1]:      # between micro-batches: what each knob keeps
            assert r["unsharded grads held"] == (0 if knob == KNOBS[0] else res["model_bytes"]), r
            assert r["full params held"] == (res["padded model bytes"] if knob == KNOBS[2] else 0), r
        assert res["rows"][-1]["unsharded grads held"] == res["rows"][-1]["full params held"] == 0
