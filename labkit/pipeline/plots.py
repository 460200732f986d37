"""Pictures of pipeline schedules (layer 4): Gantt charts, live Gantt, bubble against m.

    gantt(simulate(one_f_one_b(4, 8)))                  # one row per stage, F/B/I/W coloured
    with live_gantt(cluster, s): cluster.run(run_schedule, s, pad=0.01)   # grows as actions end
    bubble_vs_m({"GPipe": {4: 0.45, 8: 0.29}}, stages=4)                # measured points on formulas

Every figure is a static PNG (inline matplotlib); the live one redraws through one display
handle and leaves its last picture in the cell.
"""

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from labkit import figtext
from labkit.i18n import N_, tr_fig
from labkit.livefig import LiveFigure
from labkit.pipeline.formulas import bubble_ratio
from labkit.pipeline.simulate import Timeline, bubble_of, held_in_order, peak_in_flight
from labkit.pipeline.schedules import Action

__all__ = ["COLOURS", "gantt", "gantts", "side_by_side", "live_gantt", "bubble_vs_m", "activations_plot",
           "held_plot"]

COLOURS = {"F": "#4c78a8", "B": "#54a24b", "I": "#f58518", "W": "#b279a2", "idle": "#eeeeee"}
LABELS = {"F": "forward", "B": "backward", "I": N_("input grad (I)"), "W": N_("weight grad (W)"), "idle": "idle"}


def _gantt_size(stages: int) -> tuple:
    """Figure size of one Gantt chart: taller on slides, where the text is larger."""
    return figtext.figsize((10, 0.55 * stages + 1.3), (10, 0.6 * stages + 2.0))


def _fits(ax, width: float, xmax: float, text: str, pt: float) -> bool:
    """Whether `text` at `pt` points fits in a bar `width` time units wide on an axis to xmax
    (the axes' width as laid out now, less a tenth for tight_layout and the legend)."""
    fig = ax.figure
    axes_in = ax.get_position().width * fig.get_figwidth() * 0.9
    return width / xmax * axes_in >= (0.62 * len(text) + 0.4) * pt / 72


def gantt(t: Timeline, ax=None, title: str = None, unit: str = None, formula: bool = True, xmax: float = None):
    """Draw a Timeline: a row per stage, a bar per action with its micro-batch number (later
    chunks paler), idle time grey. A number that does not fit its bar at a readable size is left
    out (the legend says so). `xmax`: the time axis' end (several charts on one scale: gantts).
    Text sizes follow rcParams (labkit.figtext). Returns the axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=_gantt_size(t.stages))
    span = t.makespan or 1.0
    xmax = max(xmax or span, span)
    pt = figtext.size(7)
    dropped = False
    t0 = min((s for ivs in t.intervals for s, _, _ in ivs), default=0.0)
    kinds = set()
    for r, ivs in enumerate(t.intervals):
        y = t.stages - 1 - r
        ax.broken_barh([(0, span)], (y + 0.1, 0.8), color=COLOURS["idle"])
        groups = {}                                  # one broken_barh per kind and chunk: fast to draw
        for s, e, a in ivs:
            groups.setdefault((a.kind, a.chunk), []).append((s - t0, e - s))
        for (kind, chunk), bars in groups.items():
            kinds.add(kind)
            ax.broken_barh(bars, (y + 0.1, 0.8), facecolor=COLOURS[kind], edgecolor="white",
                           linewidth=0.6, alpha=1.0 if chunk == 0 else max(0.35, 1.0 - 0.3 * chunk))
        for s, e, a in ivs:
            if _fits(ax, e - s, xmax, str(a.mb), pt):
                ax.text(s - t0 + (e - s) / 2, y + 0.5, str(a.mb), ha="center", va="center",
                        fontsize=pt, color="white" if a.chunk == 0 else "black")
            else:
                dropped = True
    ax.set_yticks([t.stages - 1 - r + 0.5 for r in range(t.stages)],
                  [tr_fig("stage {r}", r=r) for r in range(t.stages)])
    ax.set_ylim(0, t.stages)
    ax.set_xlim(0, xmax)
    seconds = t.measured or t.extra.get("seconds")
    ax.set_xlabel(unit or (tr_fig("seconds since the step started") if seconds else
                           tr_fig("time (units of one forward)")))
    head = title or f"{t.name}: " + (tr_fig("measured") if t.measured else
                                     tr_fig("simulated with the measured times") if seconds else
                                     tr_fig("simulated"))
    line = tr_fig("bubble {bubble:.1%}", bubble=t.bubble)
    if t.layout != "loop":
        line += tr_fig(", {bubble:.1%} within each rank's own span", bubble=t.span_bubble)
    if formula and t.name.split(" (")[0] not in ("ZB-H1", "ZB-V", "DualPipeV", "DualPipe"):
        line += tr_fig(", formula (p-1)/({vm}+p-1) = {ratio:.1%}", vm="vm" if t.chunks > 1 else "m",
                       ratio=bubble_ratio(t.stages, t.microbatches, t.chunks))
    ax.set_title(f"{head} (p={t.stages}, m={t.microbatches}" + (f", v={t.chunks}" if t.chunks > 1 else "")
                 + ("):\n" if figtext.slides() else "): ") + line, fontsize=figtext.size(9))
    handles = [Patch(color=COLOURS[k], label=tr_fig(LABELS[k])) for k in ("F", "B", "I", "W", "idle")
               if k in kinds or k == "idle"]
    if t.chunks > 1:
        handles.append(Patch(facecolor=COLOURS["F"], alpha=0.6, label=tr_fig("paler: chunk 1, 2, ...")))
    handles.append(Patch(color="none", label=tr_fig("numbers: micro-batch") +
                         (tr_fig("\n(left out where\na bar is too narrow)") if dropped else "")))
    ax.legend(handles=handles, fontsize=figtext.size(7), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def gantts(timelines: list, path: str = None, height: float = None):
    """Gantt charts one above another on one time axis, to the longest makespan (none clipped)."""
    n = len(timelines)
    height = height or 0.55 * sum(t.stages for t in timelines) + 1.6 * n
    fig, axes = plt.subplots(n, 1, figsize=(11, height), sharex=True, squeeze=False)
    xmax = max(t.makespan for t in timelines)
    for ax, t in zip(axes[:, 0], timelines):
        gantt(t, ax, xmax=xmax)
    for ax in axes[:-1, 0]:
        ax.set_xlabel("")
    return _done(fig, path)


def side_by_side(left: Timeline, right: Timeline, path: str = None):
    """Two Gantt charts on one time axis (e.g. a measured run and its simulated twin)."""
    return gantts([left, right], path, height=1.1 * (left.stages + right.stages) / 2 + 2.6)


class live_gantt(LiveFigure):
    """A Gantt chart per stage that grows in the cell as the ranks' actions complete.

    Ranks running `run_schedule(..., live=True)` emit one event per action; this draws them
    (at most `fps` times a second) with the running bubble - idle over total so far - beside
    the formula's. The last picture stays in the cell as a PNG."""

    def __init__(self, cluster, schedule, fps: float = 3.0):
        super().__init__(cluster, fps)
        self.schedule = schedule
        self.intervals = [[] for _ in range(schedule.stages)]

    def timeline(self) -> Timeline:
        s = self.schedule
        t0 = min((a for ivs in self.intervals for a, _, _ in ivs), default=0.0)
        ivs = [[(a - t0, b - t0, act) for a, b, act in sorted(row, key=lambda x: x[0])]
               for row in self.intervals]
        return Timeline(s.name, s.stages, s.microbatches, s.chunks, ivs, measured=True,
                        layout=s.layout)

    def _take(self, event) -> bool:
        d = event.data
        if "pipeline" not in d or event.rank >= len(self.intervals):
            return False
        self.intervals[event.rank].append((d["t0"], d["t1"], Action(d["kind"], d["mb"], d["chunk"])))
        return True

    def figure(self):
        t = self.timeline()
        fig, ax = plt.subplots(figsize=_gantt_size(t.stages))
        gantt(t, ax, title=tr_fig("{name} on the cluster, live", name=t.name))
        done = sum(len(r) for r in t.intervals)
        total = sum(len(a) for a in self.schedule.actions)
        ax.set_xlim(0, max(t.makespan, 1e-3))
        ax.text(1.0, -0.35, tr_fig("{done}/{total} actions done; running bubble {bubble:.1%}", done=done,
                                   total=total, bubble=bubble_of(t.busy, t.makespan) if t.makespan else 0),
                transform=ax.transAxes, ha="right", fontsize=figtext.size(8))
        fig.tight_layout()
        return fig


def bubble_vs_m(measured: dict, stages: int, chunks: dict = None, path: str = None):
    """measured: {schedule name: {m: bubble}}; formula curves (p-1)/(vm+p-1) behind the points."""
    chunks = chunks or {}
    fig, ax = plt.subplots(figsize=figtext.figsize((6.5, 3.8)))
    ms = sorted({m for pts in measured.values() for m in pts})
    grid = list(range(1, max(ms) + 1))
    for v in sorted(set(chunks.get(n, 1) for n in measured)):
        ax.plot(grid, [bubble_ratio(stages, m, v) for m in grid], "--", color="grey" if v == 1 else "black",
                lw=1, label=tr_fig("formula (p-1)/({vm}+p-1)", vm="%dm" % v if v > 1 else "m"))
    for i, (name, pts) in enumerate(measured.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[m] for m in xs], "o-", ms=5, color=plt.get_cmap("tab10")(i), label=tr_fig("{name} (measured)", name=name))
    ax.set_xlabel(tr_fig("micro-batches m"))
    ax.set_ylabel(tr_fig("bubble: idle / total"))
    ax.set_title(tr_fig("Bubble against m, p={p}", p=stages), fontsize=figtext.size(10))
    ax.set_ylim(0, None)
    ax.legend(fontsize=figtext.size(7))
    return _done(fig, path)


def activations_plot(timelines: dict, path: str = None):
    """timelines: {label: measured Timeline}; per stage, peak saved-activation KiB (bars) and the
    simulated count of micro-batches alive (numbers on the bars)."""
    fig, ax = plt.subplots(figsize=figtext.figsize((6.5, 3.5)))
    _stage_bars(ax, timelines, lambda t: [b / 1024 for b in t.extra["peak_bytes"]],
                lambda t: peak_in_flight(t.intervals), "{}")
    ax.set_ylabel(tr_fig("peak saved activations (KiB)"))
    ax.set_title(tr_fig("Activation memory per stage, measured") + ("\n(" if figtext.slides() else " (")
                 + tr_fig("numbers: micro-batches alive at the peak)"), fontsize=figtext.size(9))
    ax.legend(fontsize=figtext.size(8))
    return _done(fig, path)


def held_plot(timelines: dict, path: str = None):
    """timelines: {label: measured Timeline run with frozen=None}; per stage, the activations
    held at the peak in micro-batches' worth (peak bytes over one micro-batch's bytes: bars)
    and the count from the schedule's lists (numbers on the bars)."""
    from labkit.pipeline.timeline import held_measured
    fig, ax = plt.subplots(figsize=figtext.figsize((7.5, 3.6)))
    _stage_bars(ax, timelines, held_measured, lambda t: held_in_order(_schedule_of(t)), "{:g}")
    ax.set_ylabel(tr_fig("micro-batches' worth held"))
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    ax.set_title(tr_fig("Activations held at the peak: bars measured on the ranks") +
                 ("\n" if figtext.slides() else tr_fig(", ")) + tr_fig("numbers counted from the schedule"),
                 fontsize=figtext.size(9))
    ax.legend(fontsize=figtext.size(7), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _done(fig, path)


def _done(fig, path: str = None):
    """Lay the figure out, save it to `path` if given (100 dpi), return it."""
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def _stage_bars(ax, timelines: dict, values, numbers, fmt: str) -> None:
    """Per stage, one bar per timeline ({label: Timeline}) of height values(t)[stage], with
    numbers(t)[stage] written on it (`fmt`), and the stages named on the x axis."""
    n = len(timelines)
    for i, (label, t) in enumerate(timelines.items()):
        xs = [r + (i - (n - 1) / 2) * 0.8 / n for r in range(t.stages)]
        bars = ax.bar(xs, values(t), width=0.8 / n, label=label, color=plt.get_cmap("tab10")(i))
        for bar, k in zip(bars, numbers(t)):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), fmt.format(k), ha="center",
                    va="bottom", fontsize=figtext.size(7))
    ax.set_xticks(range(t.stages), [tr_fig("stage {r}", r=r) for r in range(t.stages)])


def _schedule_of(t: Timeline):
    """The per-stage action lists of a measured Timeline, in the order each rank ran them."""
    from labkit.pipeline.validate import as_schedule
    return as_schedule([[a for _, _, a in sorted(ivs, key=lambda x: x[0])] for ivs in t.intervals],
                       t.stages, t.microbatches, t.chunks, name=t.name)
