"""Library figures the decks call keep their notebook look, and on slides no text is smaller than
labkit.slides.MIN_FONT_PT and no figure is wider than the deck's (labkit.figtext)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from labkit import figtext, slides  # noqa: E402
from labkit.throughput import Phases  # noqa: E402
from labkit.throughput.plots import phase_shares, throughput_bars  # noqa: E402
from labkit.nd.layout import Layout  # noqa: E402
from labkit.pipeline import gpipe, interleaved_1f1b, one_f_one_b, simulate  # noqa: E402
from labkit.pipeline.plots import activations_plot, bubble_vs_m, gantt, live_gantt  # noqa: E402
from labkit.pipeline.schedules import Action  # noqa: E402
from labkit.plan.plots import draw_layout  # noqa: E402


def _activations():
    out = {}
    for s in (gpipe(4, 4), one_f_one_b(4, 4)):
        t = simulate(s)
        t.extra["peak_bytes"] = [4096 * k for k in t.peak_activations]
        out[s.name] = t
    return out


def _live():
    s = one_f_one_b(4, 8)
    g = live_gantt(None, s)              # the figure only: no cluster needed to draw events
    for r, actions in enumerate(s.actions):
        for i, a in enumerate(actions[:5]):
            g.intervals[r].append((0.01 * (i + r), 0.01 * (i + r) + 0.008, Action(a.kind, a.mb, a.chunk)))
    return g.figure()


def _gantt():
    _, ax = plt.subplots(figsize=figtext.figsize((10, 3.5)))
    gantt(simulate(interleaved_1f1b(4, 8, 2), forward=0.5, backward=0.5, weight=0.5), ax)
    return ax.figure


FIGURES = {
    "gantt": _gantt,
    "live_gantt": _live,
    "bubble_vs_m": lambda: bubble_vs_m({"GPipe": {4: 0.45, 8: 0.29}, "1F1B": {4: 0.44, 16: 0.17}}, stages=4),
    "activations_plot": lambda: activations_plot(_activations()),
    "draw_layout": lambda: draw_layout(Layout(dp=2, pp=2, tp=8, gpus_per_node=8), dims=("pp", "dp")),
    "phase_shares": lambda: phase_shares(
        {"slow data": [Phases(data=0.1, forward=0.01), Phases(data=0.09, forward=0.01, wait=0.01)],
         "communication": [Phases(forward=0.01, comm=0.05), Phases(forward=0.01, comm=0.04, wait=0.01)]},
        {"slow data": "data", "communication": "communication"}),
    "throughput_bars": lambda: throughput_bars({0: 95.0, 1: 97.0, 2: 190.0, 4: 370.0}, wait_s=0.01),
}


def _texts(fig):
    fig.canvas.draw()
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("name", FIGURES)
def test_on_slides_no_text_below_the_minimum(name):
    with matplotlib.rc_context():
        slides.style()
        fig = FIGURES[name]()
        try:
            small = sorted({(round(t.get_fontsize(), 1), t.get_text()[:30]) for t in _texts(fig)
                            if t.get_fontsize() < slides.MIN_FONT_PT - 1e-6})
            assert not small, f"{name}: text below {slides.MIN_FONT_PT} pt on a slide: {small[:5]}"
            width = fig.get_size_inches()[0]
            assert width <= slides.FIGSIZE[0] + 1e-6, f"{name}: {width} in wide, the deck's figures are {slides.FIGSIZE[0]}"
        finally:
            plt.close(fig)


@pytest.mark.parametrize("name", FIGURES)
def test_in_a_notebook_the_figures_keep_their_sizes(name):
    """At matplotlib's default font.size the sizes are exactly the ones the notebooks had."""
    with matplotlib.rc_context(matplotlib.rcParamsDefault):
        assert figtext.scale() == 1.0 and not figtext.slides()
        assert figtext.size(7) == 7 and figtext.figsize((6.5, 3.8)) == (6.5, 3.8)
        fig = FIGURES[name]()
        try:
            sizes = {round(t.get_fontsize(), 1) for t in _texts(fig)}
            assert min(sizes) < slides.MIN_FONT_PT        # the notebooks' small print is unchanged
        finally:
            plt.close(fig)


def test_size_scales_with_font_size_and_never_falls_below_the_minimum():
    with matplotlib.rc_context({"font.size": 20}):
        assert figtext.scale() == 2.0
        assert figtext.size(9) == 18 and figtext.size(5) == figtext.SLIDES_MIN_PT
    assert figtext.SLIDES_MIN_PT == slides.MIN_FONT_PT
