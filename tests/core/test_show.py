"""labkit.show: the pictures are drawn from what the ranks really returned and emitted."""
import matplotlib

matplotlib.use("Agg")

import labkit  # noqa: E402
import labkit.show  # noqa: E402


def test_before_after_draws_a_cell_per_element(cluster2):
    def fn():
        import torch
        import torch.distributed as dist
        t = torch.arange(3.0) + labkit.rank()
        before = t.clone()
        dist.all_reduce(t)
        return before, t

    fig = labkit.show.before_after_figure(cluster2.run(fn), "all_reduce")
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * (3 + 3)                # 2 ranks x (before + after)
    assert {t.get_text() for t in ax.texts} >= {"1", "3", "5", "rank 0", "rank 1"}
    assert len(fig.axes) == 2                            # the colour bar: one scale for both sides


def test_before_after_keeps_a_value_s_colour_and_writes_notes():
    results = [([0.0, 1.0], [1.0]), ([2.0, 3.0], [3.0])]  # 1 and 3 appear before and after
    fig = labkit.show.before_after_figure(results, "x", notes=["slice 0", "slice 1"])
    ax = fig.axes[0]
    colour = {}
    for patch, text in zip(ax.patches, [t for t in ax.texts if t.get_text() in {"0", "1", "2", "3"}]):
        colour.setdefault(text.get_text(), set()).add(patch.get_facecolor())
    assert all(len(c) == 1 for c in colour.values()), colour
    assert {"slice 0", "slice 1"} <= {t.get_text() for t in ax.texts}


def test_live_and_progress_follow_the_events(cluster2, capsys):
    def train():
        for step in range(5):
            labkit.emit(step=step, loss=10.0 - step - labkit.rank())

    with labkit.show.progress(cluster2, total=5), labkit.show.live(cluster2, y="loss") as plot:
        cluster2.run(train)
    assert plot.series[1] == ([0, 1, 2, 3, 4], [9.0, 8.0, 7.0, 6.0, 5.0])
    assert "progress: rank 0 5/5, rank 1 5/5" in capsys.readouterr().out
    ax = plot.figure().axes[0]
    assert len(ax.lines) == 2
    assert all(float(t).is_integer() for t in ax.get_xticks())   # steps are whole numbers
