"""Pictures for notebook 10: where each rank's step goes, and DataLoader throughput."""
import matplotlib.pyplot as plt

from labkit import figtext
from labkit.i18n import N_, tr_fig
from labkit.throughput.verdict import COMM_SHARE

# communication first, so that its bar starts at 0 and reads against the 30 % line
ORDER = ("comm", "wait", "data", "forward", "backward", "optimizer")

COLOURS = {"data": "#e6a23c", "forward": "#4c8bf5", "backward": "#2c5aa0", "wait": "#bbbbbb",
           "comm": "#d9534f",
           "optimizer": "#6aa84f"}
LABELS = {"data": N_("data wait"), "forward": "forward", "backward": "backward",
          "wait": N_("waiting for other ranks"), "comm": "communication",
          "optimizer": "optimizer"}


def phase_shares(runs: dict, verdicts: dict = None):
    """One horizontal bar per (run, rank): the share of the step in each phase, on one 0-100 %
    scale so runs compare; communication first, against the notes' 30 % line (dashed).
    `runs`: name -> [Phases]."""
    rows = [(name, r, p) for name, ranks in runs.items() for r, p in enumerate(ranks)]
    big = figtext.slides()                       # larger text: shorter labels, more room
    fig, ax = plt.subplots(figsize=figtext.figsize((9, 0.32 * len(rows) + 1.6), (10, 0.34 * len(rows) + 2.4)))
    for y, (name, r, p) in enumerate(rows):
        left = 0.0
        for ph in ORDER:
            w = 100 * p.share(ph)
            ax.barh(y, w, left=left, color=COLOURS[ph], label=tr_fig(LABELS[ph]) if y == 0 else None)
            left += w
        ax.text(101, y, f"{1e3 * p.total:.0f} ms", va="center", fontsize=figtext.size(8))
    ax.set_yticks(range(len(rows)),
                  [(f"{tr_fig(name)} {r}" if big else tr_fig("{name}, rank {r}", name=tr_fig(name), r=r)) +
                   (f"  -> {tr_fig(verdicts[name])}" if verdicts and r == 0 else "")
                   for name, r, _ in rows], fontsize=figtext.size(8))
    ax.invert_yaxis()
    ax.axvline(100 * COMM_SHARE, color="k", ls="--", lw=1, label=tr_fig("30 % (the notes' communication line)"))
    ax.set_xlim(0, 125 if big else 112)
    ax.set_xlabel(tr_fig("share of the step (%); step time at the right") if big else
                  tr_fig("share of one training step (%); the time per step is printed at the right"))
    ax.set_title(tr_fig("Where each rank's step goes"))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.32 if big else -0.18), ncol=3,
              fontsize=figtext.size(8))
    fig.tight_layout()
    return fig


def throughput_bars(rates: dict, wait_s: float):
    """Items per second for each worker count, next to the ideal (workers x 1 / wait_s)."""
    ws = list(rates)
    fig, ax = plt.subplots(figsize=figtext.figsize((6, 3.2)))
    ax.bar([str(w) for w in ws], [rates[w] for w in ws], color="#4c8bf5", label=tr_fig("measured"))
    ideal = [max(w, 1) / wait_s for w in ws]
    ax.plot([str(w) for w in ws], ideal, "k_", ms=30, mew=2, label=tr_fig("ideal: max(workers, 1) / {ms:.0f} ms", ms=wait_s * 1e3))
    for i, w in enumerate(ws):
        ax.text(i, rates[w] / 2, f"{rates[w] / rates[ws[0]]:.1f}x", ha="center", va="center",
                fontsize=figtext.size(10), color="white", fontweight="bold")
    ax.set_xlabel("DataLoader num_workers")
    ax.set_ylabel(tr_fig("items per second"))
    ax.set_title(tr_fig("Workers overlap items that wait (ratio to the first bar)"))
    ax.set_ylim(0, 1.25 * max(max(ideal), max(rates.values())))
    ax.legend(fontsize=figtext.size(8), loc="upper left")
    fig.tight_layout()
    return fig
