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


def test_live_and_progress_follow_the_events(cluster2, capsys):
    def train():
        for step in range(5):
            labkit.emit(step=step, loss=10.0 - step - labkit.rank())

    with labkit.show.progress(cluster2, total=5), labkit.show.live(cluster2, y="loss") as plot:
        cluster2.run(train)
    assert plot.series[1] == ([0, 1, 2, 3, 4], [9.0, 8.0, 7.0, 6.0, 5.0])
    assert "progress: rank 0 5/5, rank 1 5/5" in capsys.readouterr().out
    assert len(plot.figure().axes[0].lines) == 2
