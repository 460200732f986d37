"""Pictures of module 13: which token goes to which expert on which rank, and the load of
every expert drawn live while training runs."""
import matplotlib.pyplot as plt
import numpy as np

from labkit.figtext import scale as _k, size as _fs
from labkit.i18n import tr_fig
from labkit.livefig import LiveFigure

_RANK_COLOURS = plt.get_cmap("tab10").colors


def routing_figure(steps: list, experts: int):
    """One column per rank: its tokens (rows) and the expert each goes to, coloured by the rank
    that holds the expert. `steps`: dispatch_steps() of every rank."""
    n = len(steps)
    per_rank = experts // n
    fig, ax = plt.subplots(figsize=(6.5 * _k(), 3.2 * _k()))
    for r, s in enumerate(steps):
        for t, e in enumerate(s["expert"]):
            owner = e // per_rank
            ax.annotate("", xy=(e, 0), xytext=(r * per_rank + (t + 0.5) * per_rank / len(s["expert"]) - 0.5, 1),
                        arrowprops=dict(arrowstyle="->", color=_RANK_COLOURS[owner], lw=1.2, alpha=0.8))
            ax.plot([r * per_rank + (t + 0.5) * per_rank / len(s["expert"]) - 0.5], [1], "o",
                    color=_RANK_COLOURS[r], ms=5)
    for e in range(experts):
        ax.plot([e], [0], "s", color=_RANK_COLOURS[e // per_rank], ms=12)
        ax.text(e, -0.12, f"E{e}", ha="center", va="top", fontsize=_fs(8))
    for r in range(n):
        ax.text(r * per_rank + per_rank / 2 - 0.5, 1.12, tr_fig("tokens of rank {r}", r=r), ha="center", fontsize=_fs(8))
    ax.set_ylim(-0.35, 1.3)
    ax.set_xlim(-0.8, experts - 0.2)
    ax.axis("off")
    ax.set_title(tr_fig("routing: each token's first choice; arrows coloured by the rank that holds the expert"),
                 fontsize=_fs(9))
    fig.tight_layout()
    plt.close(fig)                    # shown once, as the cell's value
    return fig


class LiveLoad(LiveFigure):
    """Tokens computed by each expert at the latest step (bars, coloured by the rank holding the
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
        a.axhline(load.sum() / self.experts, color="k", ls="--", lw=1, label=tr_fig("balanced"))
        a.set_xticks(range(self.experts))
        a.set_xlabel(tr_fig("expert (colour: rank that holds it)"))
        a.set_ylabel(tr_fig("tokens computed"))
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
        b.set_title(tr_fig("the busiest rank's share of all tokens"), fontsize=_fs(9))
        b.legend(fontsize=_fs(8))
        fig.tight_layout()
        return fig
