"""The figures decks 01-05 draw: in a notebook they keep their sizes; on a slide (after
labkit.slides.style(), through labkit.figtext) no text is smaller than labkit.slides.MIN_FONT_PT
and no figure is wider than the deck's figure size."""
from dataclasses import replace

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit import figtext  # noqa: E402
from labkit.slides import MIN_FONT_PT, style  # noqa: E402


@pytest.fixture
def slide():
    with matplotlib.rc_context():
        style()
        yield
    plt.close("all")


@pytest.fixture
def notebook():
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.use("Agg")
        yield
    plt.close("all")


def test_notebook_sizes_are_unchanged(notebook):
    assert [figtext.size(p) for p in (6, 7, 8, 9.5, 10)] == [6, 7, 8, 9.5, 10]
    assert figtext.figsize((6.4, 4)) == (6.4, 4) and figtext.figsize((10.4, 5.8), (10, 6)) == (10.4, 5.8)
    assert not figtext.slides()


def test_slide_sizes(slide):
    assert figtext.slides()
    assert figtext.size(6) == MIN_FONT_PT and figtext.size(10) == 16     # scaled by 16 / 10, floored
    assert figtext.figsize((6.4, 4)) == (10.0, 4.2)                      # style()'s figure
    assert figtext.figsize((10, 7), (10, 5.4)) == (10, 5.4)


def small_text(fig) -> list:
    """Visible, non-empty texts of `fig` smaller than MIN_FONT_PT, as (size, text)."""
    fig.canvas.draw()
    return sorted({(round(t.get_fontsize(), 1), t.get_text()) for t in fig.findobj(matplotlib.text.Text)
                   if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_FONT_PT - 1e-6})


def _memory_figures():
    import labkit.memory as M
    f = M.model_states(1e6, precision="fp32", optimizer="adamw")
    measured = [replace(f, other=208, label=f"rank {r}") for r in range(4)]
    stages = [M.model_states(7.5e9, zero_stage=s, world_size=64) for s in range(4)]
    return [M.plot_ranks(measured, f, title="t"),
            M.plot_breakdown(stages, gpu_gb=80, title="t"),
            M.plot_breakdown(stages, gpu_gb=80, log=True, title="t"),
            M.explorer_figure(70e9, world_size=64, zero_stage=3, checkpointing="full", log=True)]


def _live_figure():
    from labkit.memory import live
    bars = {r: [(f"0:{ph}", {"params": 1e6, "grads": 5e5, "activations": 4e6})
                for ph in ("after forward", "during backward", "after step")] for r in range(4)}
    return [live.figure(bars, "memory per phase")]


def _ring_figures():
    from labkit.comm import plots
    n = 4
    own = [[frozenset([r]) for _ in range(n)] for r in range(n)]
    step = [row[:] for row in own]
    step[1][0] = frozenset([0, 1])
    frames = [{"title": "start: own data only", "state": own, "moves": [], "seconds": {}},
              {"title": "reduce-scatter step 1", "state": step, "moves": [(0, 1, 0)], "seconds": {1: 0.01}}]
    rows = [dict(op=op, rank=r, world_size=k, bytes=100, sent=100 * s)
            for k in (2, 4) for r in range(k) for op, s in (("ring_all_reduce", 2 * (k - 1) / k),
                                                            ("naive_all_reduce", k - 1 if r == 0 else 1))]
    return [plots.draw_ring_steps(frames[:1], cols=2, title="t"),
            plots.draw_ring_steps(frames, cols=2, key=False, title=""),
            plots.draw_bytes_vs_n(rows).figure]


def _zero_fsdp_figures():
    from labkit.fsdp import plots as fplots
    from labkit.zero import plots as zplots
    wraps = {w: {"peak": {"params (gathered)": g}, "calls": {"all_gather": a, "reduce_scatter": b}}
             for w, g, a, b in (("model", 4e5, 1, 1), ("block", 2e5, 5, 3), ("linear", 1e5, 17, 9))}
    events = [dict(unit=u, kind=k, t0=t, t1=t + 0.001, phase="forward")
              for i, u in enumerate(("root", "blocks.0", "blocks.1"))
              for k, t in (("all-gather", 0.002 * i), ("compute", 0.002 * i + 0.001))]
    import labkit.memory as M
    from types import SimpleNamespace
    reports = [dict(stage=s, world=4, memory=M.model_states(1e5, zero_stage=s, world_size=4),
                    expected=SimpleNamespace(formula=M.model_states(1e5, zero_stage=s, world_size=4)),
                    param_bytes=2e5, sent=3e5 * (1.5 if s == 3 else 1), expected_sent=3e5) for s in range(4)]
    coll = {"tensor bytes": 100, "labkit ring reduce-scatter": 75, "torch reduce_scatter_tensor": 150,
            "torch all_gather_into_tensor": 75}
    return [fplots.wrap_tradeoff(wraps), zplots.layer_figure(events, title="t"),
            zplots.savings_figure({(s, 4): 2.0 + s for s in (1, 2, 3)})[0],
            zplots.stages_figure(reports, "t"), zplots.traffic_figure(reports, coll)]


@pytest.mark.parametrize("figures", [_memory_figures, _live_figure, _ring_figures, _zero_fsdp_figures],
                         ids=lambda f: f.__name__.strip("_"))
def test_deck_figures_have_no_text_under_the_minimum(slide, figures):
    for fig in figures():
        assert fig.get_size_inches()[0] <= 10.0 + 1e-9, "wider than a slide's figure: its text shrinks"
        assert small_text(fig) == [], f"text under {MIN_FONT_PT} pt on a slide"


def test_notebook_figures_keep_small_text(notebook):
    """The same figures in a notebook keep the sizes they were laid out with (e.g. 8 pt legends)."""
    sizes = {round(t.get_fontsize(), 1) for fig in _memory_figures() + _ring_figures()
             for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()}
    assert min(sizes) < MIN_FONT_PT and 8 in sizes
