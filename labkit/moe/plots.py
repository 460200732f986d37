"""Pictures of module 13: which token goes to which expert on which rank, and the load of
every expert drawn live while training runs."""
import matplotlib.pyplot as plt
import numpy as np

from labkit.figtext import scale as _k, size as _fs
from labkit.i18n import tr_fig
from labkit.livefig import LiveFigure

_RANK_COLOURS = plt.get_cmap("tab10").colors


def routing_figure(steps: list, experts: int):
    """Which expert each rank's tokens go to: one row per source rank, one column per expert,
    the number of token copies in each cell. One colour meaning: the rank, for the tokens' rank
    (row labels) and the rank that holds the expert (column labels, cell shading, legend). Cells
    with a thick outline stay on their rank; every other copy crosses to another rank.
    `steps`: dispatch_steps() of every rank."""
    from matplotlib.patches import Patch, Rectangle
    n = len(steps)
    per_rank = experts // n
    counts = np.array([s["per expert"] for s in steps])
    top = max(int(counts.max()), 1)
    fig, ax = plt.subplots(figsize=(6.8 * _k(), 3.4 * _k()))
    for r in range(n):
        for e in range(experts):
            c, owner = int(counts[r, e]), e // per_rank
            ax.add_patch(Rectangle((e, n - 1 - r), 1, 1, facecolor=_RANK_COLOURS[owner],
                                   alpha=0.15 + 0.75 * c / top if c else 0.04, edgecolor="white", lw=1))
            ax.text(e + 0.5, n - 0.5 - r, str(c), ha="center", va="center", fontsize=_fs(9),
                    color="black" if c else "#999999")
        ax.add_patch(Rectangle((r * per_rank, n - 1 - r), per_rank, 1, fill=False, edgecolor="black", lw=2))
    ax.set_xlim(0, experts)
    ax.set_ylim(0, n)
    ax.set_xticks([e + 0.5 for e in range(experts)], [f"E{e}" for e in range(experts)], fontsize=_fs(8))
    ax.set_yticks([n - 0.5 - r for r in range(n)], [tr_fig("tokens of rank {r}", r=r) for r in range(n)],
                  fontsize=_fs(8))
    for lbl, r in zip(ax.get_yticklabels(), range(n)):
        lbl.set_color(_RANK_COLOURS[r])
    for lbl, e in zip(ax.get_xticklabels(), range(experts)):
        lbl.set_color(_RANK_COLOURS[e // per_rank])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [Patch(color=_RANK_COLOURS[r], label=tr_fig("rank {r}", r=r)) for r in range(n)]
    handles.append(Patch(facecolor="none", edgecolor="black", lw=2, label=tr_fig("stays on its rank")))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=n + 1,
              fontsize=_fs(8), frameon=False, title=tr_fig("colour: rank (of the tokens, of the expert)"),
              title_fontsize=_fs(8))
    ax.set_title(tr_fig("routing: token copies from each rank (row) to each expert (column)"),
                 fontsize=_fs(9))
    fig.tight_layout()
    plt.close(fig)                    # shown once, as the cell's value
    return fig


class LiveLoad(LiveFigure):
    """Token copies computed by each expert at the latest step (bars, coloured by the rank holding the
    expert) and, over steps, the busiest rank's share of all tokens, from train_load's events."""

    def __init__(self, cluster, experts: int, title: str = "", fps: float = 3.0, ymax=None):
        super().__init__(cluster, fps)
        self.experts, self.title, self.ymax, self.rows = experts, title, ymax, []

    def _take(self, event) -> bool:
        if "load" not in event.data or event.rank != 0:
            return False
        self.rows.append(event.data)
        return True

    def figure(self):
        n = self.cluster.world_size
        per = self.experts // n
        fig, (a, b) = plt.subplots(1, 2, figsize=(9 * _k(), 3.0 * _k()))
        load = np.array(self.rows[-1]["load"]) if self.rows else np.zeros(self.experts)
        a.bar(range(self.experts), load, color=[_RANK_COLOURS[e // per] for e in range(self.experts)])
        a.axhline(load.sum() / self.experts, color="k", ls="--", lw=1,
                  label=tr_fig("balanced: {total} copies / {e} experts = {each:.0f}", total=int(load.sum()),
                               e=self.experts, each=load.sum() / self.experts))
        a.set_xticks(range(self.experts))
        a.set_xlabel(tr_fig("expert (colour: rank that holds it)"))
        a.set_ylabel(tr_fig("token copies computed"))
        if self.ymax:
            a.set_ylim(0, self.ymax)
        step = self.rows[-1]["step"] if self.rows else 0
        a.set_title(tr_fig("{title} step {step}", title=self.title, step=step).strip(), fontsize=_fs(9))
        a.legend(fontsize=_fs(8))
        steps = [r["step"] for r in self.rows]
        share = [max(sum(r["load"][j * per:(j + 1) * per]) for j in range(n)) / max(sum(r["load"]), 1)
                 for r in self.rows]
        b.plot(steps, share, marker=".")
        b.axhline(1 / n, color="k", ls="--", lw=1, label=tr_fig("balanced: 1/{n}", n=n))
        b.set_ylim(0, 1)
        b.set_xlabel(tr_fig("step"))
        b.set_ylabel(tr_fig("busiest rank's share"))
        b.set_title(tr_fig("the busiest rank's share of all token copies"), fontsize=_fs(9))
        b.legend(fontsize=_fs(8))
        fig.tight_layout()
        return fig
