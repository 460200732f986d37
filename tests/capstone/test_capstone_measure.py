"""labkit.capstone.measure: the bytes one 2 x 2 x 2 step moves per dimension, counted on the 8
ranks, equal the earlier notebooks' formulas; memory per rank equals 4 B x the parameters it
holds; the planner's traffic formula gives the same TP and PP bytes."""
import pytest

import labkit


@pytest.fixture(scope="module")
def measured():
    from labkit.capstone import Config
    from labkit.capstone.measure import record_step
    with labkit.Cluster(8, backend="gloo", spares=0, timeout=120) as c:
        return c.run(record_step, Config(), dp=2, pp=2, tp=2)


def test_bytes_per_dimension_equal_the_formulas(measured):
    from labkit.capstone import Config
    from labkit.capstone.measure import traffic_rows
    rows = traffic_rows(measured, Config(), 2, 2, 2)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    dims = {(r["dim"], r["what"]) for r in rows}
    assert {("tp", "activations all-reduce"), ("pp", "activations/gradients sent"),
            ("dp", "gradients all-reduce")} <= dims
    for r in rows:        # the planner (notebook 08) agrees where it counts the same thing
        if r["dim"] in ("tp", "pp") and r["planner"] is not None:
            assert r["sent"] == r["planner"], r
    # every rank's DP all-reduce carries the parameters it holds: the two stages together hold
    # each TP rank's share of the whole model once
    from labkit.capstone import build
    from labkit.capstone.measure import params_on_rank
    total = sum(p.numel() for p in build(Config()).parameters())
    assert sum(params_on_rank(Config(), 2, 1, s) for s in range(2)) == total


def test_memory_per_rank_equals_the_formula(measured):
    from labkit.capstone import Config
    from labkit.capstone.measure import memory_rows
    rows = memory_rows(measured, Config(), 2, 2, 2)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
    assert {r["category"] for r in rows if r["formula"]} == {"parameters", "gradients"}


def test_a_gantt_of_every_rank(measured, tmp_path):
    from labkit.capstone.plots import step_gantt
    kinds = {e[0] for r in measured for e in r["events"]}
    assert {"F", "B", "AR", "recv wait"} <= kinds
    assert sum(e[0] == "F" for e in measured[0]["events"]) == 2      # two micro-batches
    step_gantt(measured, path=str(tmp_path / "g.png"))
    assert (tmp_path / "g.png").stat().st_size > 10_000


def test_speed_rows_put_the_planner_beside_the_measured_order():
    from labkit.capstone import Config
    from labkit.capstone.measure import LAYOUTS, speed_rows
    from labkit.capstone.plots import speed_report
    fake = [{lay: 1.0 + k for k, lay in enumerate(LAYOUTS)} for _ in range(8)]   # seconds
    rows = speed_rows(fake, Config())
    assert [r["ratio"] for r in rows] == pytest.approx([1.0, 1 / 2, 1 / 3, 1 / 4])
    assert all(r["predicted"] > 0 for r in rows)
    assert "planner's order" in speed_report(rows)
