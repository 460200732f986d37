"""Memory pictures (layer 4): static matplotlib figures; the explorer adds controls on top.

plot_ranks       measured stacked bar per rank, the formula's bar beside it, the difference
                 written on the measured bar
plot_breakdown   formula bars side by side (e.g. ZeRO-0..3) against a GPU memory line
explorer_figure  one configuration against a GPU: does it fit, by how much
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from labkit.memory.activations import activations, fits, gpt_shape
from labkit.memory.breakdown import CATEGORIES, GB, Breakdown
from labkit.memory.formulas import model_states
from labkit.figtext import figsize as _figsize, size as _fs, slides as _on_slide
from labkit.i18n import N_, tr_fig, trc        # figure text in the learner's language

COLORS = {"params": "#4C72B0", "grads": "#DD8452", "master": "#55A868", "momentum": "#8172B3",
          "variance": "#937860", "other": "#DA8BC3", "buffers": "#8C8C8C",
          "activations": "#CCB974", "temporary": "#64B5CD"}
# what the legend says for each of Breakdown's fields (the field names stay as they are)
LABELS = {"params": N_("params"), "grads": N_("grads"), "master": N_("master"), "momentum": N_("momentum"),
          "variance": N_("variance"), "other": N_("other"), "buffers": N_("buffers"),
          "activations": N_("activations"), "temporary": N_("temporary")}


def _patch(c: str) -> Patch:
    """A legend entry for category `c`, in the learner's language."""
    return Patch(color=COLORS[c], label=tr_fig(LABELS[c]))


def _unit(values) -> tuple:
    top = max([abs(v) for v in values] + [1])
    for name, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if top >= size:
            return name, size
    return "B", 1


def _stack(ax, x, b: Breakdown, div: float, width: float, hatch=None, alpha=1.0) -> None:
    bottom = 0.0
    for c in CATEGORIES:
        v = getattr(b, c) / div
        if v:
            ax.bar(x, v, width, bottom=bottom, color=COLORS[c], hatch=hatch, alpha=alpha,
                   edgecolor="white" if hatch is None else "black", linewidth=0.5)
            bottom += v


def _legend(ax, used) -> None:
    handles = [_patch(c) for c in CATEGORIES if c in used]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label=tr_fig("formula")))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=_fs(8))


def plot_ranks(measured: list, formula=None, title: str = N_("memory per rank"), ax=None):
    """Measured stacked bar per rank with the formula's bar (hatched) beside it.

    `formula` is one Breakdown for every rank or a list, one per rank. The difference
    (measured - formula, total) is written on each measured bar, exact in bytes.
    """
    formulas = formula if isinstance(formula, (list, tuple)) else [formula] * len(measured)
    shown = list(measured) + [f for f in formulas if f is not None]
    name, div = _unit([b.total for b in shown])
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=_figsize((2.2 + 1.6 * len(measured), 4.2)))
    used = set()
    for r, (m, f) in enumerate(zip(measured, formulas)):
        _stack(ax, r - 0.2, m, div, 0.38)
        used |= set(m.nonzero())
        if f is not None:
            _stack(ax, r + 0.2, f, div, 0.38, hatch="//", alpha=0.55)
            used |= set(f.nonzero())
            d = m.total - f.total
            pct = 100 * d / f.total if f.total else 0.0
            ax.text(r, max(m.total, f.total) / div * 1.02, f"{'+' if d >= 0 else ''}{d:,.0f} B\n({pct:+.4f} %)",
                    ha="center", va="bottom", fontsize=_fs(9),
                    bbox=dict(facecolor="white", edgecolor="#999999", boxstyle="round,pad=0.2"))
    ax.set_xticks(range(len(measured)),
                  [f"rank {r}\n" + tr_fig("measured | formula") if f is not None and not _on_slide() else f"rank {r}"
                   for r, f in enumerate(formulas)], fontsize=_fs(8))      # on a slide: the legend says it
    ax.set_ylabel(name)
    ax.set_title(tr_fig(title) + ("\n" + tr_fig("above each pair: measured - formula")
                                  if any(f is not None for f in formulas) else ""), fontsize=_fs(10))
    ax.set_ylim(0, 1.25 * max(b.total for b in shown) / div)
    _legend(ax, used)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_breakdown(breakdowns: list, labels=None, gpu_gb: float = None, title: str = "", ax=None,
                   per: str = N_("GPU"), log: bool = False):
    """Formula (or measured) bars side by side, with an optional GPU memory line (in GB).

    Stacked by category on a linear axis; `log=True` draws each group (parameters,
    gradients, optimizer state, activations) as its own bar on a log axis instead, so a
    small share (ZeRO-3's optimizer state next to DDP's) stays readable. `per` names what one
    bar is held by in the axis label: "GPU", or "rank" for ranks on a CPU."""
    if log:
        return _plot_groups_log(breakdowns, labels, gpu_gb, title, ax, per)
    name, div = _unit([b.total for b in breakdowns] + [(gpu_gb or 0) * GB])
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=_figsize((1.8 + 1.3 * len(breakdowns), 4.2)))
    used = set()
    for i, b in enumerate(breakdowns):
        _stack(ax, i, b, div, 0.6)
        used |= set(b.nonzero())
        ax.text(i, b.total / div, f"{b.total / div:.1f} {name}", ha="center", va="bottom", fontsize=_fs(8))
    if gpu_gb:
        _gpu_line(ax, gpu_gb, div)
    ax.set_xticks(range(len(breakdowns)), labels or [b.label for b in breakdowns], fontsize=_fs(8))
    ax.set_ylabel(tr_fig("{name} per {per}", name=name, per=tr_fig(per)))
    ax.set_title(tr_fig(title), fontsize=_fs(10))
    top = max([b.total / div for b in breakdowns] + [(gpu_gb or 0) * GB / div])
    ax.set_ylim(0, 1.15 * top)
    handles = [_patch(c) for c in CATEGORIES if c in used]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=_fs(8))
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def _gpu_line(ax, gpu_gb: float, div: float) -> None:
    ax.axhline(gpu_gb * GB / div, color="crimson", linestyle="--", linewidth=1.2)
    ax.annotate(tr_fig("{gb:g} GB GPU", gb=gpu_gb) + " ", (0.99, gpu_gb * GB / div), color="crimson",
                xycoords=("axes fraction", "data"), va="bottom", ha="right", fontsize=_fs(8))


# the log view's groups: category names -> one bar
GROUPS = {"parameters": ("params",), "gradients": ("grads",),
          "optimizer state": ("master", "momentum", "variance", "other"),
          "activations": ("activations", "temporary")}
def _group_label(g: str) -> str:
    """A group's legend label in the learner's language ("parameters" with a context: elsewhere
    it is a count, a widget's 参数量; here the memory they take)."""
    return {"parameters": trc("memory taken by", "parameters"), "gradients": tr_fig("gradients"),
            "optimizer state": tr_fig("optimizer state"), "activations": tr_fig("activations")}[g]


GROUP_COLORS = {"parameters": COLORS["params"], "gradients": COLORS["grads"],
                "optimizer state": COLORS["master"], "activations": COLORS["activations"]}


def _plot_groups_log(breakdowns, labels, gpu_gb, title, ax, per):
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=_figsize((2.2 + 1.6 * len(breakdowns), 4.2)))
    values = [{g: sum(getattr(b, c) for c in cs) / GB for g, cs in GROUPS.items()} for b in breakdowns]
    groups = [g for g in GROUPS if any(v[g] for v in values)]
    w = 0.8 / len(groups)
    for i, v in enumerate(values):
        for j, g in enumerate(groups):
            if v[g]:
                x = i - 0.4 + w * (j + 0.5)
                ax.bar(x, v[g], w * 0.95, color=GROUP_COLORS[g])
                ax.text(x, v[g] * 1.08, f"{v[g]:.3g}", ha="center", va="bottom", fontsize=_fs(7), rotation=90,
                        bbox=dict(facecolor="white", edgecolor="none", pad=0.3))
    for i, b in enumerate(breakdowns):                 # the stacked bar's height, to hold against the GPU
        ax.hlines(b.total / GB, i - 0.42, i + 0.42, color="black", linewidth=1.5)
    if gpu_gb:
        _gpu_line(ax, gpu_gb, GB)
    ax.set_yscale("log")
    low = min(v[g] for v in values for g in groups if v[g])
    high = max([v[g] for v in values for g in groups] + [gpu_gb or 0])
    ax.set_ylim(low / 3, high * 6)
    ax.set_xticks(range(len(breakdowns)), labels or [b.label for b in breakdowns], fontsize=_fs(8))
    ax.set_ylabel(tr_fig("GB per {per} (log scale)", per=tr_fig(per)))
    ax.set_title(tr_fig(title), fontsize=_fs(10))
    from matplotlib.lines import Line2D
    ax.legend(handles=[Patch(color=GROUP_COLORS[g], label=_group_label(g)) for g in groups]
              + [Line2D([], [], color="black", linewidth=1.5, label=tr_fig("total per {per}", per=tr_fig(per)))],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=_fs(8))
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def configuration(n_params=7e9, world_size=1, zero_stage=0, precision="mixed", optimizer="adam",
                  checkpointing="none", seq=2048, micro_batch=1, gpu_gb=80, offload=False):
    """(model-state Breakdown with activations, Fit) for one explorer setting."""
    layers, hidden, heads = gpt_shape(n_params)
    ms = model_states(n_params, precision=precision, optimizer=optimizer,
                      zero_stage=zero_stage, world_size=world_size, offload=offload)
    act = activations(layers, hidden, heads, seq, micro_batch, checkpointing=checkpointing,
                      bytes_per_value=4 if precision == "fp32" else 2)
    from dataclasses import replace
    full = replace(ms, activations=act.peak,
                   label=f"{ms.label}, {layers}L h={hidden}, s={seq} b={micro_batch} ckpt={checkpointing}")
    return full, fits(ms, act, gpu_gb)


def explorer_figure(n_params=7e9, world_size=1, zero_stage=0, precision="mixed",
                    optimizer="adam", checkpointing="none", seq=2048, micro_batch=1, gpu_gb=80,
                    log=False):
    """Left: this setting, what one GPU holds (model state and activations) against the GPU
    line, answered in the title. Right: ZeRO-0..3 at the same setting, to see which stage would
    fit (`log=True`: each group as its own bar on a log axis)."""
    kw = dict(n_params=n_params, world_size=world_size, precision=precision, optimizer=optimizer,
              checkpointing=checkpointing, seq=seq, micro_batch=micro_batch, gpu_gb=gpu_gb)
    here, fit = configuration(zero_stage=zero_stage, **kw)
    stages = [configuration(zero_stage=s, **kw)[0] for s in range(4)]
    slide = _on_slide()                    # larger text: shorter titles, legends where they fit
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 5.4) if slide else (11, 4.6),
                                 gridspec_kw={"width_ratios": [1, 2.2]}, layout="constrained" if slide else None)
    plot_breakdown([here], labels=[tr_fig("this setting:") + f"\nZeRO-{zero_stage}, N={world_size}"], gpu_gb=gpu_gb, ax=a1)
    a1.get_legend().remove()
    handles = [_patch(c) for c in CATEGORIES if getattr(here, c)]
    if slide:                              # under both panels, in one or two rows
        fig.legend(handles=handles, loc="outside lower left", ncol=3, fontsize=_fs(7),
                   title=tr_fig("left panel"), title_fontsize=_fs(7), alignment="left")
    else:
        a1.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=_fs(7))
    f = dict(need=fit.needed / GB, cap=gpu_gb, gb=abs(fit.margin) / GB)
    if slide:                              # shorter, on three lines
        head = (tr_fig("fits\n{need:.1f} of {cap:g} GB\n(spare {gb:.1f} GB)", **f) if fit.fits else
                tr_fig("does NOT fit\n{need:.1f} of {cap:g} GB\n(over by {gb:.1f} GB)", **f))
    else:
        head = (tr_fig("one GPU holds: fits\n{need:.1f} of {cap:g} GB (spare {gb:.1f} GB)", **f) if fit.fits else
                tr_fig("one GPU holds: does NOT fit\n{need:.1f} of {cap:g} GB (over by {gb:.1f} GB)", **f))
    a1.set_title(head, fontsize=_fs(10), color="darkgreen" if fit.fits else "crimson")
    plot_breakdown(stages, labels=[f"ZeRO-{s}" for s in range(4)], gpu_gb=gpu_gb, ax=a2, log=log,
                   title=tr_fig("every ZeRO stage, same setting") if slide else
                   tr_fig("every ZeRO stage, same setting: {b:g}B params, {precision} {optimizer}, "
                          "N={n},\nseq {seq} x batch {mb}, checkpointing {ck}", b=n_params / 1e9,
                          precision=precision, optimizer=optimizer, n=world_size, seq=seq,
                          mb=micro_batch, ck=checkpointing))
    if not slide:
        fig.tight_layout()
    return fig

