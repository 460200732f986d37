"""The pictures of fp16 training (layer 4): the formats' ranges beside measured gradients, and
the loss of the underflow runs with the gradient elements that underflowed to 0.

    fig = ranges_figure({"first layer": grads})     # fp32, bf16, fp16 on one log2 axis
    fig = underflow_figure({"fp32": run, "fp16, no scaling": run, ...})   # fp16.underflow results
"""
import math

from labkit import figtext
from labkit.i18n import tr_fig
from labkit.tricks.loss_scale import ranges

FORMATS = (("fp32", "float32", "#4c72b0"), ("bf16", "bfloat16", "#55a868"), ("fp16", "float16", "#c44e52"))


def ranges_figure(grads: dict = None, lo: int = -155, hi: int = 235):
    """One row per format on a log2 axis: its subnormals (light), its normal numbers (dark),
    labelled with the smallest value and the largest; below, a histogram of |gradient| for each
    tensor in `grads` ({label: tensor}), zeros left out, and the fp16 limits as lines."""
    import matplotlib.pyplot as plt
    import torch
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
        for x, what, ha in ((-24, tr_fig("fp16's smallest (2^-24)") + " ", "right"),      # a space from the line
                            (math.log2(65504), " " + tr_fig("fp16's largest"), "left")):
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
