"""`python -m labkit.bench start` (issue 36): each figure against its goal, exit 1 on a miss.
Only the verdict is tested here (no processes); the bench itself is run by hand."""
from labkit.bench import start


def test_a_figure_over_its_goal_is_a_miss_and_fails_the_bench(capsys):
    good = {"cold": 0.5, "warm": 0.1, "class": 2.0, "zygotes/user": 1, "round trip": 12.0}
    assert start.report(good, {}) == 0
    assert "all goals met" in capsys.readouterr().out
    for name, goal in start.GOALS.items():
        ratios = {**good, name: goal * 1.01}
        assert start.report(ratios, {}) == 1
        out = capsys.readouterr().out
        assert f"MISS: {name}" in out and out.count("MISS") == 2


def test_a_figure_at_its_goal_passes():
    assert all(ok for _, _, _, ok in start.verdicts(dict(start.GOALS)))


