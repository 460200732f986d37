"""Pictures of context parallelism: which K/V block each rank holds at each ring step, the work
per rank under a causal mask (contiguous against zigzag), and a ring step's timeline per rank."""
import matplotlib.pyplot as plt

from labkit.cp import layout as L
from labkit.figtext import size as fs
from labkit.i18n import tr_fig


_KIND_COLOUR = {"full": "#7fb3d5", "diagonal": "#f6c86b", "skip": "#dddddd"}


def ring_steps(n: int = 4, seq: int = 16, layout: str = "contiguous", causal: bool = True, ax=None,
               title: str = None, legend: bool = True):
    """Rows: ranks; columns: ring steps. Each cell names the K/V block the rank holds; it is
    cut into one square per (query chunk, key chunk) pair (one, or 2 x 2 under zig-zag), each
    coloured by what the mask leaves of it: computed whole, computed and part masked, skipped."""
    ax = ax or plt.subplots(figsize=(1.4 * n + 1.5, 0.55 * n + 1.2))[1]
    for r in range(n):
        mine = L.ranges(seq, n, r, layout)
        for t in range(n):
            src = (r - t) % n
            theirs = L.ranges(seq, n, src, layout)
            w, h = 0.95 / len(theirs), 0.9 / len(mine)
            for i, q in enumerate(mine):              # query chunks top to bottom
                for j, k in enumerate(theirs):        # key chunks left to right
                    ax.add_patch(plt.Rectangle((t + j * w, n - 1 - r + (len(mine) - 1 - i) * h),
                                               w, h, facecolor=_KIND_COLOUR[L.pair_kind(q, k, causal)],
                                               edgecolor="white", linewidth=1.0))
            ax.text(t + 0.47, n - 0.55 - r, tr_fig("K/V {src}", src=src), ha="center", va="center",
                    fontsize=fs(9), bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.7))
            if t < n - 1 and r < n - 1:
                ax.annotate("", xy=(t + 1.0, n - 1.55 - r),
                            xytext=(t + 0.8, n - 0.85 - r), arrowprops=dict(arrowstyle="->", lw=0.6,
                                                                         color="#555555"))
    ax.set_xlim(0, n)
    ax.set_ylim(0, n)
    ax.set_xticks([t + 0.47 for t in range(n)], [tr_fig("step {t}", t=t) for t in range(n)], fontsize=fs(9))
    ax.set_yticks([n - 0.55 - r for r in range(n)], [tr_fig("rank {r}", r=r) for r in range(n)], fontsize=fs(9))
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    if legend:
        ax.legend(*_ring_legend(), loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3,
                  fontsize=fs(8), frameon=False)
    ax.set_title(title or tr_fig("ring attention, {layout} layout{causal}\nthe K/V block each rank holds; "
                                 "arrows: sent on (rank {last}'s to rank 0)", layout=layout,
                                 causal=tr_fig(", causal") if causal else "", last=n - 1), fontsize=fs(10))
    return ax


def _ring_legend():
    handles = [plt.Rectangle((0, 0), 1, 1, color=_KIND_COLOUR[k]) for k in ("full", "diagonal", "skip")]
    return handles, [tr_fig("all keys visible"), tr_fig("part masked"), tr_fig("skipped (all masked)")]


def ring_steps_pair(n: int = 4, seq: int = 16, causal: bool = True, figsize=(12.4, 4.6)):
    """Contiguous beside zig-zag, one legend below both."""
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    for ax, lay, name in zip(axes, L.LAYOUTS, (tr_fig("contiguous"), tr_fig("zig-zag"))):
        ring_steps(n, seq, lay, causal, ax=ax, legend=False,
                   title=tr_fig("{name}{causal}: K/V block held per step", name=name,
                                causal=tr_fig(", causal") if causal else ""))
    fig.legend(*_ring_legend(), loc="lower center", ncol=3, fontsize=fs(8), frameon=False,
               title=tr_fig("one square per (query chunk, key chunk) pair: 1 contiguous, 2 x 2 zig-zag"),
               title_fontsize=fs(8))
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig


def work_bars(measured: dict, formula: dict, ax=None, ylabel=None):
    """measured, formula: layout -> per-rank numbers. Bars measured, dots the formula."""
    ax = ax or plt.subplots(figsize=(7, 3.2))[1]
    layouts = list(measured)
    n = len(measured[layouts[0]])
    width = 0.8 / len(layouts)
    for i, lay in enumerate(layouts):
        xs = [r + (i - (len(layouts) - 1) / 2) * width for r in range(n)]
        ax.bar(xs, measured[lay], width * 0.95, label=tr_fig("{layout}: measured", layout=lay))
        ax.plot(xs, formula[lay], "k_", markersize=14, mew=2,
                label=tr_fig("formula (labkit.cp.layout)") if i == 0 else None)
    ax.set_xticks(range(n), [tr_fig("rank {r}", r=r) for r in range(n)], fontsize=fs(9))
    ax.set_ylabel(tr_fig("score entries computed per rank") if ylabel is None else ylabel, fontsize=fs(9))
    ax.legend(fontsize=fs(8), loc="upper left")
    ax.set_title(tr_fig("causal attention: work per rank"), fontsize=fs(10))
    return ax


def timeline(per_rank: list, ax=None, title=None, t0=None):
    """per_rank: each rank's events (phase, step, "compute" | "transfer" | "wait", start, end),
    wall seconds. Per rank, an upper lane of block computations and a lower lane of transfers
    (posted -> seen complete, thin) with the waits (exposed transfer) over them in red."""
    ax = ax or plt.subplots(figsize=(9, 0.6 * len(per_rank) + 1.5))[1]
    if t0 is None:
        t0 = min((e[3] for ev in per_rank for e in ev), default=0.0)
    n = len(per_rank)
    for r, ev in enumerate(per_rank):
        bars = {}
        for phase, step, kind, a, b in ev:
            bars.setdefault((phase, kind), []).append(((a - t0) * 1e3, (b - a) * 1e3))
        y = n - 1 - r
        for (phase, kind), xs in bars.items():
            lane = {"compute": (y + 0.5, 0.38), "transfer": (y + 0.2, 0.16), "wait": (y + 0.1, 0.36)}[kind]
            ax.broken_barh(xs, lane, color=COLOURS[(phase, kind)],
                           edgecolor="white" if kind == "compute" else "none", linewidth=0.5)
    ax.set_yticks([n - 1 - r + 0.5 for r in range(n)], [tr_fig("rank {r}", r=r) for r in range(n)], fontsize=fs(9))
    ax.set_ylim(0, n)
    ax.set_xlabel(tr_fig("milliseconds"), fontsize=fs(9))
    keys = [("forward", "compute"), ("backward", "compute"), ("forward", "transfer"), ("forward", "wait")]
    labels = [tr_fig("forward: attention on a block"), tr_fig("backward: gradients of a block"),
              tr_fig("transfer in flight (posted -> seen done)"), tr_fig("waiting for it (exposed)")]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in keys]
    ax.legend(handles, labels, fontsize=fs(8), loc="upper center", bbox_to_anchor=(0.5, -0.28),
              ncol=2, frameon=False)
    ax.set_title(tr_fig("one ring-attention step per rank") if title is None else title, fontsize=fs(10))
    return ax


COLOURS = {("forward", "compute"): "#2e86c1", ("backward", "compute"): "#e67e22",
           ("forward", "transfer"): "#9e9e9e", ("backward", "transfer"): "#9e9e9e",
           ("forward", "wait"): "#c0392b", ("backward", "wait"): "#c0392b"}
