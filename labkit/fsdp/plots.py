"""Notebook 05's pictures (layer 4): the wrapping trade-off and the prefetch timeline."""
import matplotlib.pyplot as plt
from labkit.figtext import figsize as _figsize, size as _fs, slides as _on_slide
from labkit.i18n import N_, tr_fig


def _font():
    """The learner's font before the axes exist: an axes' title and tick labels keep the font
    they were made with."""
    from labkit.i18n import lang
    if lang() == "zh":
        from labkit.i18n.fonts import use_cjk
        use_cjk()


COLORS = {"all_gather": "#4c72b0", "reduce_scatter": "#dd8452", "forward": "#55a868", "backward": "#c44e52"}
NAMES = {"all_gather": N_("all-gather"), "reduce_scatter": N_("reduce-scatter"), "forward": N_("forward"),
         "backward": N_("backward")}


def wrap_tradeoff(reports: dict):
    """reports: {wrap: peak_report of rank 0}. Left: peak of gathered parameters (+ all-gather
    buffers) per wrap; right: all-gathers and reduce-scatters per step. One figure."""
    wraps = list(reports)
    _font()
    fig, (a, b) = plt.subplots(1, 2, figsize=_figsize((9, 3.2)))
    gathered = [(reports[w]["peak"].get("params (gathered)", 0)) / 1e3 for w in wraps]
    a.bar(wraps, gathered, color="#8172b3")
    a.set_ylabel(tr_fig("peak gathered params (kB)") if _on_slide() else
                 tr_fig("peak gathered parameters, kB per rank"))
    a.set_xlabel(tr_fig("wrap (one FSDP unit per ...)"))
    a.set_title(tr_fig("coarse: a high peak"))
    for k, kind in enumerate(("all_gather", "reduce_scatter")):
        b.bar([i + 0.4 * k for i in range(len(wraps))], [reports[w]["calls"][kind] for w in wraps], 0.4,
              color=COLORS[kind], label=tr_fig("all-gathers") if kind == "all_gather" else tr_fig("reduce-scatters"))
    b.set_xticks([i + 0.2 for i in range(len(wraps))], wraps)
    b.set_ylabel(tr_fig("calls per training step"))
    b.set_xlabel(tr_fig("wrap (one FSDP unit per ...)"))
    b.set_title(tr_fig("fine: many small calls"))
    b.legend()
    fig.tight_layout()
    return fig


def timeline(runs: dict):
    """runs: {label: prefetch.timeline result of one rank}. One row per label: collectives above,
    block compute below, on one time axis (ms from the step's start)."""
    _font()
    fig, axes = plt.subplots(len(runs), 1, figsize=_figsize((10, 1.6 * len(runs) + 0.6)), sharex=True)
    span = max(e["t1"] for r in runs.values() for e in r["events"]) * 1e3
    for ax, (label, r) in zip(axes, runs.items()):
        for e in r["events"]:
            y = 1 if e["kind"] in ("all_gather", "reduce_scatter") else 0
            w = (e["t1"] - e["t0"]) * 1e3
            ax.barh(y, w, left=e["t0"] * 1e3, height=0.6, color=COLORS[e["kind"]], edgecolor="white")
            # the block index inside its bar, where the bar is wide enough to hold it
            if e["unit"].startswith("blocks") and w > 0.02 * span:
                ax.text((e["t0"] * 1e3) + w / 2, y, e["unit"].split(".")[1], fontsize=_fs(7),
                        ha="center", va="center", color="white")
        ax.set_yticks([0, 1], [tr_fig("compute"), tr_fig("collectives")])
        ax.set_title(tr_fig(label), fontsize=_fs(10), loc="left")
    axes[-1].set_xlabel(tr_fig("ms since the step started (rank 0; numbers: block index, where the "
                               "bar has room)"))
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, [tr_fig(NAMES[k]) for k in COLORS], loc="upper right", ncol=4, fontsize=_fs(8))
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def categories_log(bars: dict, rank: int = 0, title: str = ""):
    """One rank's bytes by category at each (step, phase) of a live run (labkit.memory.live
    Display.bars), side by side on a log scale: the small categories (the root's master shard,
    the gathered parameters) show beside the large ones."""
    from labkit.memory.live import CATEGORIES, COLORS as CAT_COLORS
    rows = bars.get(rank, [])
    cats = [c for c in CATEGORIES if any(snap.get(c, 0) for _, snap in rows)]
    _font()
    fig, ax = plt.subplots(figsize=_figsize((10, 3.4)))
    width = 0.8 / max(len(cats), 1)
    for k, c in enumerate(cats):
        xs = [i + (k - (len(cats) - 1) / 2) * width for i in range(len(rows))]
        vals = [snap.get(c, 0) / 1e3 for _, snap in rows]
        ax.bar([x for x, v in zip(xs, vals) if v], [v for v in vals if v], width, color=CAT_COLORS[c], label=tr_fig(c))
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [label.replace(":", "\n", 1) for label, _ in rows], fontsize=_fs(8))
    ax.set_ylabel(tr_fig("kB on this rank (log scale)"))
    ax.set_xlabel(tr_fig("step and phase (a missing bar: 0 bytes)"))
    ax.set_title(tr_fig(title) if title else tr_fig("rank {rank}: bytes by category, log scale", rank=rank),
                 fontsize=_fs(10))
    ax.legend(fontsize=_fs(8), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
