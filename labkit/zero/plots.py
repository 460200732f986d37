"""Pictures for notebook 04 (layer 4): memory by stage against the formula, traffic, the
savings curves, one layer's stage-3 forward as gather / compute / free."""
import matplotlib.pyplot as plt

from labkit.memory.formulas import world_size_for_savings, zero_savings, zero_savings_limit
from labkit.figtext import figsize as _figsize, size as _fs, slides as _on_slide
from labkit.i18n import N_, tr_fig  # figure text in the learner's language

CATS = (N_("params"), N_("grads"), N_("master"), N_("momentum"), N_("variance"), N_("other"))
COLORS = {"params": "#4c72b0", "grads": "#dd8452", "master": "#55a868", "momentum": "#c44e52",
          "variance": "#e377c2", "other": "#7f7f7f"}


def stages_figure(reports: list, title: str = ""):
    """reports: step_report results of one rank for stages 0..3. Measured stacked bars next to
    the formula's (hatched), one pair per stage, one scale."""
    fig, ax = plt.subplots(figsize=_figsize((8, 3.8)))
    for i, r in enumerate(reports):
        for j, (b, hatch) in enumerate(((r["memory"], None), (r["expected"].formula, "//"))):
            bottom = 0
            for c in CATS:
                v = getattr(b, c) / 1e6
                if v:
                    ax.bar(i + (j - 0.5) * 0.38, v, 0.36, bottom=bottom, color=COLORS[c],
                           hatch=hatch, edgecolor="white" if hatch else None,
                           label=c if (i == 0 and j == 0) or (c == "master" and j == 0) else None)
                    bottom += v
            ax.text(i + (j - 0.5) * 0.38, bottom, f"{bottom:.2f}", ha="center", va="bottom", fontsize=_fs(7))
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    from matplotlib.patches import Patch
    seen["formula (hatched)" if not _on_slide() else "formula (right,\nhatched)"] = Patch(
        facecolor="white", edgecolor="0.3", hatch="//")
    if _on_slide():                                  # larger text: the legend beside the axes
        ax.legend(seen.values(), seen.keys(), fontsize=_fs(7), loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.legend(seen.values(), seen.keys(), fontsize=_fs(7), loc="upper right")
    ax.set_xticks(range(len(reports)))
    ax.set_xticklabels([f"ZeRO-{r['stage']}" + (" (DDP)" if r["stage"] == 0 else "") +
                        ("" if _on_slide() else "\nmeasured | formula")        # a slide: in the legend
                        for r in reports], fontsize=_fs(8))
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)         # room for the totals above the bars
    ax.set_ylabel("model state per rank (MB)")
    ax.set_title(title, fontsize=_fs(10))
    fig.tight_layout()
    return fig


def traffic_figure(reports: list, collectives: dict = None, title: str = ""):
    """Bytes sent per rank per step / parameter bytes, measured, with the formula's ticks;
    optionally the reduce-scatter comparison (ring vs torch's gloo) beside it."""
    ncols = 2 if collectives else 1
    fig, axes = plt.subplots(1, ncols, figsize=_figsize((5 * ncols + 1, 3.4)), squeeze=False)
    ax = axes[0][0]
    n = reports[0]["world"]
    for i, r in enumerate(reports):
        pb = r["param_bytes"]
        ax.bar(i, r["sent"] / pb, 0.6, color="#4c72b0", label=tr_fig("measured") if i == 0 else None)
        ax.plot([i - 0.3, i + 0.3], [r["expected_sent"] / pb] * 2, color="k", lw=2,
                label=tr_fig("formula") if i == 0 else None)
        ax.text(i, r["sent"] / pb, f"{r['sent'] / pb:.2f}", ha="center", va="bottom", fontsize=_fs(8))
    ax.set_xticks(range(len(reports)))
    ax.set_xticklabels([f"ZeRO-{r['stage']}" + (("\n" if _on_slide() else " ") + "(DDP)" if r["stage"] == 0 else "")
                        for r in reports], fontsize=_fs(8))
    slide = _on_slide()                              # larger text: shorter titles and labels
    ax.set_ylabel(tr_fig("sent / parameter bytes") if slide else tr_fig("bytes sent per rank per step\n/ parameter bytes"))
    ax.set_title(tr_fig("one step, N={n}", n=n) if slide else
                 tr_fig("traffic per step, N={n}: 2(N-1)/N = {two:.2f}, 3(N-1)/N = {three:.2f}",
                        n=n, two=2 * (n - 1) / n, three=3 * (n - 1) / n), fontsize=_fs(9))
    ax.set_ylim(0, 3)
    ax.legend(fontsize=_fs(8), loc="upper left")
    if collectives:
        ax = axes[0][1]
        t = collectives["tensor bytes"]
        names = [k for k in collectives if k != "tensor bytes"]
        vals = [collectives[k] / t for k in names]
        ax.bar(range(len(names)), vals, 0.6, color=["#55a868", "#c44e52", "#8172b3"])
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=_fs(8))
        ax.axhline((n - 1) / n, color="k", lw=1, ls="--", label=f"(N-1)/N = {(n - 1) / n:.2f}")
        ax.set_xticks(range(len(names)))
        short = {"torch reduce_scatter_tensor": "torch\nreduce-\nscatter", "torch all_gather_into_tensor":
                 "torch\nall-gather", "labkit ring reduce-scatter": "labkit ring\nreduce-\nscatter"}
        ax.set_xticklabels([short.get(k, k) if slide else k.replace(" ", "\n", 2) for k in names],
                           fontsize=_fs(7))
        ax.set_ylabel(tr_fig("sent / tensor bytes") if slide else tr_fig("bytes sent / tensor bytes"))
        ax.set_ylim(0, 2)
        ax.set_title(tr_fig("one collective on gloo, N={n}", n=n), fontsize=_fs(9))
        ax.legend(fontsize=_fs(8))
    fig.suptitle(title, fontsize=_fs(10))
    fig.tight_layout()
    return fig


def savings_figure(measured: dict, n_max: int = 1024, precision: str = "mixed"):
    """The notes' "about 4x, 8x, Nx": formula curves of DDP bytes / ZeRO bytes against N (log),
    measured points {(stage, N): ratio}, and the N where each stage first reaches 90 % of its
    limit (ZeRO-3: of N itself)."""
    ns = [n for n in range(1, n_max + 1)]
    fig, ax = plt.subplots(figsize=_figsize((7.5, 4)))
    colors = {1: "#4c72b0", 2: "#dd8452", 3: "#55a868"}
    out = {}
    for s in (1, 2, 3):
        ax.plot(ns, [zero_savings(s, n, precision) for n in ns], color=colors[s],
                label=tr_fig("ZeRO-{s} formula", s=s))
        lim = zero_savings_limit(s, precision)
        if lim != float("inf"):
            n90 = world_size_for_savings(s, 0.9 * lim, precision)
            ax.axhline(lim, color=colors[s], ls=":", lw=1)
            ax.plot([n90], [zero_savings(s, n90, precision)], "v", color=colors[s], ms=8)
            ax.annotate(tr_fig("90 % of {lim:g}x at N={n}", lim=lim, n=n90), (n90, zero_savings(s, n90, precision)),
                        textcoords="offset points", xytext=(5, -12), fontsize=_fs(8), color=colors[s])
            out[s] = n90
        pts = [(n, v) for (st, n), v in measured.items() if st == s]
        if pts:
            ax.plot(*zip(*pts), "o", color=colors[s], mec="k", ms=7)
    shown = sorted({n for _, n in measured})
    if shown:
        ax.plot([], [], "o", color="w", mec="k", label=tr_fig("measured (N = {ns})", ns=", ".join(map(str, shown))))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel(tr_fig("data-parallel ranks N"))
    ax.set_ylabel(tr_fig("model state: DDP / ZeRO (x less)"))
    ax.set_title(tr_fig("ZeRO savings per rank, {precision} Adam (ZeRO-3's is exactly N)", precision=precision),
                 fontsize=_fs(10))
    ax.legend(fontsize=_fs(8), loc="upper left")
    fig.tight_layout()
    return fig, out


UNIT_NAMES = {"root": "root (token embedding = head)", "pos": "pos (position embedding)",
              "ln_f": "ln_f (final LayerNorm)"}


def _root_compute(events: list) -> list:
    """The root unit's forward hook spans the whole forward (the root module *is* the model); its
    own compute is the part no other unit covers: the embedding before the first layer's
    all-gather, and the head after the last layer's free. Returns those two events."""
    root = [e for e in events if e["unit"] == "root" and e["kind"] == "compute"]
    others = [e for e in events if e["unit"] != "root" and e["phase"] == "forward"]
    if not root or not others:
        return root
    r = root[0]
    first, last = min(e["t0"] for e in others), max(e["t1"] for e in others)
    if not r["t0"] <= first <= last <= r["t1"]:        # the root's compute does not enclose them
        return root
    return [{**r, "t1": first}, {**r, "t0": last}]


def layer_figure(events: list, units=None, title: str = ""):
    """Stage-3 hook events as a timeline: one row per unit, gather / compute / free (and
    reduce-scatter in backward); a free is drawn as a short red mark; a light bar shows how
    long the unit's full parameters are held. The root's compute is its own part only."""
    colors = {"all-gather": "#8172b3", "prefetch": "#b3a6d9", "wait": "#d0c8ea",
              "compute": "#55a868", "free": "#c44e52", "reduce-scatter": "#dd8452",
              "held": "#e6e6e6"}
    units = units or list(dict.fromkeys(e["unit"] for e in events))
    events = [e for e in events if not (e["unit"] == "root" and e["kind"] == "compute")] + _root_compute(events)
    fig, ax = plt.subplots(figsize=_figsize((9, 0.45 * len(units) + 1.4)))
    for u in units:                                        # held: first gather to its free
        y = len(units) - 1 - units.index(u)
        mine = [e for e in events if e["unit"] == u]
        starts = [e["t0"] for e in mine if e["kind"] in ("all-gather", "prefetch")]
        ends = [e["t0"] for e in mine if e["kind"] == "free"]
        if starts and ends and max(ends) > min(starts):
            ax.barh(y, (max(ends) - min(starts)) * 1e3, left=min(starts) * 1e3, height=0.8,
                    color=colors["held"], zorder=0)
    for e in events:
        if e["unit"] not in units:
            continue
        y = len(units) - 1 - units.index(e["unit"])
        w = max(e["t1"] - e["t0"], 0) * 1e3
        if e["kind"] == "free":
            ax.plot([e["t0"] * 1e3] * 2, [y - 0.35, y + 0.35], color=colors["free"], lw=2)
        else:
            ax.barh(y, max(w, 0.05), left=e["t0"] * 1e3, height=0.6, color=colors[e["kind"]])
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    kinds = sorted({e["kind"] for e in events} | {"held"}, key=list(colors).index)
    names = {"held": "parameters held (gathered)"}
    ax.legend([Line2D([0], [0], color=colors[k], lw=2) if k == "free" else Patch(color=colors[k])
               for k in kinds], [names.get(k, k) for k in kinds], fontsize=_fs(7), loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    ax.set_yticks(range(len(units)))
    ax.set_yticklabels([UNIT_NAMES.get(u, u) for u in reversed(units)], fontsize=_fs(8))
    ax.set_xlabel(tr_fig("ms since the step started (rank 0)"))
    ax.set_title(title, fontsize=_fs(10))
    fig.tight_layout()
    return fig
