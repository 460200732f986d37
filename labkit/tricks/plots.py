"""Pictures of module 09 (layer 4): memory against step time, and a live version of it; the
formats' ranges beside measured gradients, and the loss of the fp16 underflow runs with the
gradient elements that underflowed to 0.

    fig = ranges_figure({"first layer": grads})     # fp32, bf16, fp16 on one log2 axis
    fig = underflow_figure({"fp32": run, "fp16, no scaling": run, ...})   # fp16.underflow results
"""
import math
import unicodedata

from labkit import figtext

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


# fp16 training: the formats' ranges and the underflow runs
FORMATS = (("fp32", "float32", "#4c72b0"), ("bf16", "bfloat16", "#55a868"), ("fp16", "float16", "#c44e52"))


def ranges_figure(grads: dict = None, lo: int = -155, hi: int = 235):
    """One row per format on a log2 axis: its subnormals (light), its normal numbers (dark),
    labelled with the smallest value and the largest; below, a histogram of |gradient| for each
    tensor in `grads` ({label: tensor}), zeros left out, and the fp16 limits as lines."""
    import matplotlib.pyplot as plt
    import torch
    from labkit.tricks.loss_scale import ranges
    rows = 2 if grads else 1
    fig, axes = plt.subplots(rows, 1, figsize=figtext.figsize((10, 2.6 + 2.4 * (rows - 1))), sharex=True,
                             gridspec_kw=dict(height_ratios=[1.1] + [1.4] * (rows - 1)), squeeze=False)
    ax = axes[0, 0]
    for i, (name, dtype, colour) in enumerate(FORMATS):
        r = ranges(getattr(torch, dtype))
        sub, normal, top = (math.log2(r[k]) for k in ("smallest_subnormal", "smallest_normal", "max"))
        ax.barh(i, normal - sub, left=sub, color=colour, alpha=0.3, height=0.6)
        ax.barh(i, top - normal, left=normal, color=colour, height=0.6)
        digits = -math.log10(r["eps"])
        ax.text(top + 3, i, tr_fig("{lo:.0e} to {hi:.0e}, about {digits:.1f} digits", lo=r["smallest_subnormal"],
                                   hi=r["max"], digits=digits),
                ha="left", va="center", fontsize=figtext.size(8))
    ax.set_yticks(range(len(FORMATS)), [f[0] for f in FORMATS])
    ax.set_ylim(-0.6, len(FORMATS) - 0.4)
    ax.set_title(tr_fig("range of each format (light: subnormals, fewer digits; dark: normal numbers)"),
                 fontsize=figtext.size(9))
    if grads:
        hx = axes[1, 0]
        for label, g in grads.items():
            a = g.detach().abs().flatten().double()
            a = a[a > 0]
            hx.hist(torch.log2(a).numpy(), bins=40, alpha=0.6, label=tr_fig("{label} ({k:,} nonzero values)", label=label, k=a.numel()))
        for x, what, ha in ((-24, tr_fig("fp16's smallest (2^-24) "), "right"),
                            (math.log2(65504), tr_fig(" fp16's largest"), "left")):
            hx.axvline(x, color="#c44e52", ls="--")
            hx.text(x, hx.get_ylim()[1] * 0.95, what, color="#c44e52", fontsize=figtext.size(8), va="top", ha=ha)
        hx.set_ylabel(tr_fig("elements"))
        hx.legend(fontsize=figtext.size(8), loc="upper right")
        hx.set_title(tr_fig("|gradient| measured in fp32: what lies left of fp16's smallest becomes 0 in fp16"),
                     fontsize=figtext.size(9))
    axes[-1, 0].set_xlim(lo, hi)
    axes[-1, 0].set_xlabel(tr_fig("log2 of the magnitude"))
    fig.tight_layout()
    return fig


def underflow_figure(runs: dict):
    """Left: loss per step of each run (log scale); right: gradient elements underflowed to 0."""
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=figtext.figsize((10, 4.2)))
    for k, (name, r) in enumerate(runs.items()):
        steps = range(len(r["loss"]))
        style = dict(marker="o", ms=3, lw=3 - k * 0.6, label=name, alpha=0.85)
        a.plot(steps, r["loss"], **style)
        b.plot(steps, r["underflowed"], **style)
        skipped = [i for i, s in enumerate(r["skipped"]) if s]
        if skipped:
            a.plot(skipped, [r["loss"][i] for i in skipped], "kx", ms=8)
    a.set_yscale("log")
    a.set_xlabel(tr_fig("step"))
    a.set_ylabel(tr_fig("loss"))
    a.set_title(tr_fig("loss (x: a step skipped for an inf)"), fontsize=figtext.size(9))
    b.set_xlabel(tr_fig("step"))
    b.set_ylabel(tr_fig("elements exactly 0 in fp16, nonzero in fp32"))
    b.set_title(tr_fig("gradient elements underflowed to 0 (of {n})", n=next(iter(runs.values()))["n"]),
                fontsize=figtext.size(9))
    fig.legend(*a.get_legend_handles_labels(), fontsize=figtext.size(8), loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return fig
