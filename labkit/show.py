"""Small pictures of what the ranks hold, and live plots of what they emit (layer 4).

    labkit.show.before_after(cluster.run(fn), "all_reduce (sum)")   # fn returns (before, after)
    with labkit.show.live(cluster, y="loss"):                       # ranks call labkit.emit(step=, loss=)
        cluster.run(train)

Every figure is a static PNG (inline matplotlib), so it survives nbconvert, GitHub and nbval;
live plots redraw through one display handle and leave the final picture in the cell.
"""
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import Normalize
from matplotlib.ticker import MaxNLocator

from labkit.figtext import scale as _k, size as _fs   # text and figures grow on slides (labkit.slides.style())
from labkit.livefig import LiveFigure  # re-exported: labkit.show.LiveFigure
from labkit.i18n import N_, tr, tr_fig, tr_join


def _as_array(t) -> np.ndarray:
    if t is None:
        return np.zeros(0)
    if hasattr(t, "detach"):
        t = t.detach().cpu().float().numpy()
    return np.atleast_1d(np.asarray(t, dtype=float)).reshape(-1)


def _row(ax, y: float, values: np.ndarray, x0: float, norm, cmap) -> None:
    for i, v in enumerate(values):
        r, g, b, _ = cmap(norm(v))
        dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5          # white text on dark cells
        ax.add_patch(plt.Rectangle((x0 + i, y), 0.95, 0.8, color=(r, g, b)))
        ax.text(x0 + i + 0.475, y + 0.4, f"{v:g}", ha="center", va="center", fontsize=_fs(8),
                color="white" if dark else "black")


def before_after(results, title: str, labels=(N_("before"), N_("after")), notes=None) -> None:
    """Show every rank's tensor before and after a collective (see before_after_figure)."""
    before_after_figure(results, title, labels, notes)
    plt.show()


def before_after_figure(results, title: str, labels=(N_("before"), N_("after")), notes=None):
    """Draw every rank's tensor before and after a collective, one row per rank.

    `results` is what `cluster.run` returned when each rank returned ``(before, after)``;
    cells are coloured by value on ONE scale for both sides (a value keeps its colour, the
    colour bar says which) and show the number. `notes`: one text per rank, written to the
    right of its "after" row (e.g. which slice of the sum that rank holds).
    """
    rows = [(_as_array(b), _as_array(a)) for b, a in results]
    title, labels = tr_fig(title) if title else title, [tr_fig(t) for t in labels]   # the learner's language
    width_b = max(len(b) for b, _ in rows) or 1
    width_a = max(len(a) for _, a in rows) or 1
    allv = np.concatenate([np.concatenate([b, a]) for b, a in rows])
    norm = Normalize(allv.min() if allv.size else 0, allv.max() if allv.size else 1)
    cmap = plt.get_cmap("viridis")
    gap = 2.0
    note_w = max((len(n) for n in notes), default=0) * 0.16 if notes else 0.0
    k = _k()
    fig, ax = plt.subplots(figsize=(k * (0.55 * (width_b + width_a + gap) + 1.2 + 0.55 * note_w + 0.9),
                                    k * (0.5 * len(rows) + (0.9 if title else 0.65))))   # no title: no room for one
    for r, (b, a) in enumerate(rows):
        y = len(rows) - 1 - r
        ax.text(-0.3, y + 0.4, f"rank {r}", ha="right", va="center", fontsize=_fs(9))
        _row(ax, y, b, 0, norm, cmap)
        _row(ax, y, a, width_b + gap, norm, cmap)
        if notes:
            ax.text(width_b + gap + width_a + 0.2, y + 0.4, notes[r], ha="left", va="center", fontsize=_fs(9))
    ax.text(width_b / 2, len(rows) + 0.1, labels[0], ha="center", fontsize=_fs(9))
    ax.text(width_b + gap + width_a / 2, len(rows) + 0.1, labels[1], ha="center", fontsize=_fs(9))
    ax.annotate("", xy=(width_b + gap - 0.3, len(rows) / 2), xytext=(width_b + 0.3, len(rows) / 2),
                arrowprops=dict(arrowstyle="->"))
    ax.set_xlim(-1.6, width_b + gap + width_a + 0.2 + note_w)
    ax.set_ylim(-0.2, len(rows) + 0.6)
    ax.set_title(title, fontsize=_fs(10))
    ax.axis("off")
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.03, pad=0.01)
    bar.set_label(tr_fig("value (one scale, before and after)"), fontsize=_fs(8))
    bar.ax.tick_params(labelsize=_fs(7))
    fig.tight_layout()
    return fig


class live(LiveFigure):
    """Plot `y` against `x` per rank from `labkit.emit(...)` events while a run goes on
    (see LiveFigure for how and how often it redraws)."""

    def __init__(self, cluster, y: str = "loss", x: str = "step", fps: float = 4.0, title: str = None):
        super().__init__(cluster, fps)
        self.x, self.y = x, y
        self.title = title or f"{y} per rank (live, from labkit.emit)"
        self.series = {}

    def _take(self, event) -> bool:
        d = event.data
        if self.y not in d:
            return False
        xs, ys = self.series.setdefault(event.rank, ([], []))
        xs.append(d.get(self.x, len(xs)))
        ys.append(d[self.y])
        return True

    def figure(self):
        fig, ax = plt.subplots(figsize=(6 * _k(), 3.2 * _k()))
        for r, (xs, ys) in sorted(self.series.items()):
            ax.plot(xs, ys, marker=".", label=f"rank {r}")
        ax.set_xlabel(self.x)
        ax.set_ylabel(self.y)
        xs = [x for xs, _ in self.series.values() for x in xs]
        if xs and all(float(x).is_integer() for x in xs):       # steps: whole-number ticks only
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(self.title, fontsize=_fs(10))
        if self.series:
            ax.legend(fontsize=_fs(8))
        fig.tight_layout()
        return fig


class progress:
    """One progress bar per rank (ipywidgets), advanced by `labkit.emit(step=...)` events.

    The bars are widgets; when the run ends one plain line with every rank's count is printed,
    so a headless run (nbval, nbconvert) records where each rank got to.
    """

    def __init__(self, cluster, total: int, key: str = "step"):
        self.cluster, self.total, self.key = cluster, total, key
        self.done = [0] * cluster.world_size
        self.bars = None

    def _on_event(self, event) -> None:
        if self.key in event.data:
            self.done[event.rank] = int(event.data[self.key]) + 1
            if self.bars is not None:
                self.bars[event.rank].value = self.done[event.rank]

    def __enter__(self):
        try:
            import ipywidgets as widgets
            from IPython import get_ipython
            from IPython.display import display
            if get_ipython() is not None:
                self.bars = [widgets.IntProgress(value=0, min=0, max=self.total, description=f"rank {r}")
                             for r in range(self.cluster.world_size)]
                display(widgets.VBox(self.bars))
        except ImportError:
            self.bars = None
        self._unsubscribe = self.cluster.on_event(self._on_event)
        return self

    def __exit__(self, *exc):
        self._unsubscribe()
        print(tr("progress: {ranks}", ranks=tr_join(tr("rank {rank} {done}/{total}", rank=r, done=d, total=self.total)
                                                    for r, d in enumerate(self.done))))
