"""Pictures of module 09 (layer 4): memory against step time, and a live version of it."""
import unicodedata

from labkit.i18n import N_, lang, tr_fig
from labkit.i18n.fonts import use_cjk
from labkit.livefig import LiveFigure

SHORT = {"M": N_("mixed precision"), "a": N_("bf16 autocast"), "C": N_("full checkpointing"),
         "S": N_("selective checkpointing"), "A": N_("accumulation"), "8": N_("8-bit Adam"), "O": N_("offload"),
         "Z": N_("ZeRO-1")}
COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]   # by number of tricks


def scatter(points, title: str = "", ax=None, baseline: str = "-", figsize=None):
    """points: [(code, peak bytes on the device, step seconds)], or with (fastest, slowest)
    seconds after them: a bar from fastest to slowest step through the dot (the median).
    One dot per configuration, labelled with its letters, coloured by how many tricks it
    combines; a legend says what the letters mean."""
    import matplotlib
    import matplotlib.pyplot as plt
    if ax is None:
        from labkit import figtext
        fig, ax = plt.subplots(figsize=figsize or figtext.figsize((10, 6)))
    fig = ax.figure
    seen = set()
    bars = all(len(p) == 5 for p in points) and points
    points = [tuple(p[:3]) for p in points] if not bars else points
    for point in points:
        code, dev, sec = point[:3]
        n = len(code.strip("-"))
        if bars:
            lo, hi = point[3], point[4]
            ax.errorbar(1e3 * sec, dev / 1e6, xerr=[[1e3 * (sec - lo)], [1e3 * (hi - sec)]],
                        color=COLORS[n % len(COLORS)], capsize=4, lw=1.2, zorder=2)
        lab = (tr_fig("{n} tricks", n=n) if n != 1 else tr_fig("{n} trick", n=n)) if n not in seen else None
        seen.add(n)
        ax.scatter(1e3 * sec, dev / 1e6, color=COLORS[n % len(COLORS)], s=60 if code != baseline else 140,
                   marker="*" if code == baseline else "o", label=lab, zorder=3)
        right = sec > 0.75 * max(p[2] for p in points) and len(points) > 1   # label leftwards
        ax.annotate(tr_fig("baseline") if code == baseline else code, (1e3 * sec, dev / 1e6),
                    textcoords="offset points", xytext=(-5, 4) if right else (5, 4),
                    ha="right" if right else "left")
    ax.margins(x=0.12)
    ax.set_xlabel(tr_fig("step time on the slowest rank (ms: median, bar from fastest to slowest step)")
                  if bars else tr_fig("step time on the slowest rank (ms)"))
    ax.set_ylabel(tr_fig("peak per rank (MB)"))
    ax.set_ylim(0, 1.15 * max((p[1] / 1e6 for p in points), default=1))
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: labels[i])
    used = sorted({c for p in points for c in p[0].strip("-")})
    ax.set_title(title or tr_fig("memory against time (lower left is better)"))
    keys = {c: tr_fig(SHORT[c]) for c in used}
    width = max((_columns(keys[c]) for c in used), default=12) + 4
    em = matplotlib.rcParams["font.size"] / 72 * 0.62          # a monospace character, inches
    fig.tight_layout(rect=(0, 0, max(0.5, 1 - width * em / fig.get_figwidth()), 1))
    # the keys go right of the axes, after the layout (which would shrink the axes for them)
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="lower left",
              bbox_to_anchor=(1.02, 0.0), title=tr_fig("combined"))
    mono = ["monospace"] + ([use_cjk()] if lang() == "zh" else [])
    ax.text(1.02, 1.0, "\n".join(f"{c}  {keys[c]}" for c in used), transform=ax.transAxes,
            va="top", family=mono)                   # Chinese from the CJK font after the monospace
    return fig


def _columns(text: str) -> int:
    """Width of text in monospace columns (a Chinese character takes two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


class LiveScatter(LiveFigure):
    """The scatter, redrawn as rank 0 emits each finished configuration."""

    def __init__(self, cluster, total: int = 0, fps: float = 1.0, known: dict = None):
        super().__init__(cluster, fps)
        self.points, self.total = [], total
        self.known = dict(known or {})       # {code: peak bytes} of configs only timed this time

    def _take(self, event) -> bool:
        d = event.data
        if "trick" not in d:
            return False
        peak = d["peak_device"] or self.known.get(d["trick"], 0)
        self.points.append((d["trick"], peak, d["step_s"], d.get("step_lo", d["step_s"]),
                            d.get("step_hi", d["step_s"])))
        return True

    def figure(self):
        done = len(self.points) >= self.total
        return scatter(self.points, title="" if done else
                       tr_fig("measured so far: {done} of {total} configurations", done=len(self.points),
                              total=self.total))


def loss_figure(curves: dict, title: str = None):
    """curves: {name: [loss per step]} on one axis."""
    import matplotlib.pyplot as plt
    from labkit import figtext
    fig, ax = plt.subplots(figsize=figtext.figsize((8, 3.8)))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, label=name, marker="o", ms=3)
    ax.xaxis.get_major_locator().set_params(integer=True)    # steps are whole numbers
    ax.set_xlabel(tr_fig("step"))
    ax.set_ylabel(tr_fig("training loss"))
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(tr_fig("fp32 Adam against 8-bit Adam") if title is None else title)
    fig.tight_layout()
    return fig
