"""Pictures of collectives, drawn from measured runs (layer 4: matplotlib, ipywidgets).

    frames = ring_frames(events, n)        # events from labkit.comm.runs.record_ring(cluster)
    draw_ring_steps(frames)                # static grid: one panel per step, and a colour key
    ring_slider(frames)                    # the same, one step at a time with a slider
    draw_bytes_vs_n(rows)                  # bytes sent per rank / S, ring vs naive, against N
"""
import matplotlib.pyplot as plt
from matplotlib.colors import LinearSegmentedColormap
from labkit.figtext import figsize as _figsize, size as _fs, slides as _on_slide
from labkit.i18n import N_, tr, tr_fig  # figure text in the learner's language

_CMAP = LinearSegmentedColormap.from_list("partial", ["#f3f0e7", "#f6c76b", "#e07b39", "#2a9d5c"])


def ring_frames(events: list, n: int) -> list:
    """Replay recorded ring events into frames. Frame 0 is the start; frame f is the state after
    the f-th step. A state is state[rank][chunk] = the set of ranks whose data that cell sums.

    Each frame: {"title", "state", "moves": [(src, dst, chunk)], "seconds": {rank: t1 - t0}}.
    Reduce-scatter adds what arrives (set union); all-gather overwrites it (a copy)."""
    state = [[frozenset([r]) for _ in range(n)] for r in range(n)]
    frames = [{"title": N_("start: own data only"), "state": state, "moves": [], "seconds": {}}]
    steps = sorted({(e["phase"], e["step"]) for e in events}, key=lambda k: (k[0] != "reduce-scatter", k[1]))
    for phase, step in steps:
        new = [row[:] for row in state]
        moves, seconds = [], {}
        for e in (e for e in events if (e["phase"], e["step"]) == (phase, step)):
            src, dst, c = e["recv_from"], e["rank"], e["recv_chunk"]
            new[dst][c] = state[dst][c] | state[src][c] if phase == "reduce-scatter" else state[src][c]
            moves.append((src, dst, c))
            seconds[dst] = e["t1"] - e["t0"]
        state = new
        frames.append({"title": f"{phase} step {step + 1}", "phase": phase, "step": step + 1,
                       "state": state, "moves": moves, "seconds": seconds})
    return frames


_ARRIVED = "#b03a2e"     # border of a cell that just arrived


def _colour(k: int, n: int):
    """Colour of a cell that sums k of n ranks' data (1 = own data only, n = the full sum)."""
    return _CMAP((k - 1) / max(n - 1, 1))


def draw_frame(frame: dict, ax, n: int) -> None:
    """One step: rows are ranks, columns chunks; colour = how many ranks' data a cell sums,
    text = which ranks; cells that just arrived have a thick dark-red border and say where
    from, on a white label so it reads at any size."""
    state = frame["state"]
    arrived = {(dst, c): src for src, dst, c in frame["moves"]}
    for r in range(n):
        for c in range(n):
            k = len(state[r][c])
            new = (r, c) in arrived
            ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor=_colour(k, n),
                                       edgecolor=_ARRIVED if new else "white",
                                       linewidth=3 if new else 1))
            label = "+".join(str(x) for x in sorted(state[r][c])) if k < n else tr_fig("all")
            ax.text(c + 0.5, r + (0.36 if new else 0.5), label, ha="center", va="center",
                    fontsize=_fs(9 if n <= 4 else 7), color="white" if k == n else "black",
                    fontweight="bold" if k == n else "normal")
            if new:
                ax.text(c + 0.5, r + 0.76, tr_fig("from {r}", r=arrived[(r, c)]), ha="center", va="center",
                        fontsize=_fs(8 if n <= 4 else 6), color=_ARRIVED,
                        bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"))
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)
    ax.set_xticks([c + 0.5 for c in range(n)], [f"c{c}" if _on_slide() else tr_fig("chunk {c}", c=c) for c in range(n)],
                  fontsize=_fs(7))                   # a slide's larger text: "c0" under each column
    ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=_fs(8))
    ax.tick_params(length=0)
    ms = max(frame["seconds"].values()) * 1e3 if frame["seconds"] else None
    own = frame["title"] if not frame.get("phase") else None     # a key marked N_() where it is made
    if own is not None and ms is not None:
        title = tr_fig("{title}\n(slowest rank {ms:.2f} ms)", title=tr_fig(own), ms=ms)
    elif own is not None:
        title = tr_fig(own) + "\n"
    elif ms is not None:
        title = tr_fig("{phase} step {step}\n(slowest rank {ms:.2f} ms)", phase=frame["phase"], step=frame["step"],
                       ms=ms)
    else:
        title = tr_fig("{phase} step {step}", phase=frame["phase"], step=frame["step"]) + "\n"
    ax.set_title(title, fontsize=_fs(9))


def draw_key(ax, n: int) -> None:
    """The colour key: what a cell's colour and border mean."""
    ax.axis("off")
    ax.set_xlim(0, 1)
    ax.set_ylim(n + 2.2, -0.4)
    ax.text(0, -0.1, tr_fig("key"), fontsize=_fs(9), fontweight="bold", va="center")
    for k in range(1, n + 1):
        what = (tr_fig("its own data only") if k == 1 else tr_fig("the full sum (all)") if k == n
                else tr_fig("a partial sum of {k} ranks", k=k))
        ax.add_patch(plt.Rectangle((0, k - 0.4), 0.18, 0.8, facecolor=_colour(k, n), edgecolor="white"))
        ax.text(0.24, k, what, fontsize=_fs(8), va="center")
    y = n + 1.2
    ax.add_patch(plt.Rectangle((0, y - 0.4), 0.18, 0.8, facecolor="white", edgecolor=_ARRIVED, linewidth=3))
    ax.text(0.24, y, tr_fig("arrived at this step\n(\"from r\": sent by rank r)"), fontsize=_fs(8), va="center")
    ax.text(0, y + 1.0, tr_fig("a cell's text: whose data it sums"), fontsize=_fs(8), va="center", style="italic")


def draw_ring_steps(frames: list, cols: int = None, key: bool = True, title: str = None):
    """All frames of a recorded ring all-reduce, plus a colour key, as a static figure.

    Top row: the start and the reduce-scatter steps; bottom row: the all-gather steps and the
    key, so no panel is empty (N panels a row). `cols` forces one row-major grid instead;
    `key=False` leaves the key out, `title` replaces the figure's title (e.g. for a few frames,
    `draw_ring_steps(frames[1:4], cols=3, key=False, title="reduce-scatter")`)."""
    n = len(frames[0]["state"])
    rs = [f for f in frames if not f["title"].startswith("all-gather")]
    ag = [f for f in frames if f["title"].startswith("all-gather")]
    if cols is None and ag and len(rs) == len(ag) + 1:
        layout = [rs, ag + (["key"] if key else [])]
    else:
        cols = cols or len(frames) + int(key)
        cells = frames + (["key"] if key else [])
        layout = [cells[i:i + cols] for i in range(0, len(cells), cols)]
    width = max(len(row) for row in layout)
    size = _figsize((2.6 * width, 2.7 * len(layout) + 0.4),
                    (10, 4.6 if len(layout) == 1 else 6))   # a slide: one row under its title
    fig, axes = plt.subplots(len(layout), width, figsize=size, squeeze=False)
    for row, line in zip(axes, layout):
        for ax, frame in zip(row, line):
            if frame == "key":
                draw_key(ax, n)
            else:
                draw_frame(frame, ax, n)
        for ax in row[len(line):]:
            ax.axis("off")
        if _on_slide():                              # rank labels once per row: wider cells
            for ax in row[1:len(line)]:
                ax.tick_params(labelleft=False)
    if title is None:
        title = tr_fig("ring all-reduce on {n} ranks, recorded: reduce-scatter ({steps} steps, "
                       "top), then all-gather ({steps} steps, bottom)", n=n, steps=n - 1)
    fig.suptitle(title, fontsize=_fs(10))
    fig.tight_layout()
    return fig


def ring_slider(frames: list):
    """An ipywidgets slider over the frames (needs a live kernel; the static grid is
    `draw_ring_steps`)."""
    import ipywidgets as widgets
    from IPython.display import display
    n = len(frames[0]["state"])
    out = widgets.Output()
    slider = widgets.IntSlider(value=0, min=0, max=len(frames) - 1, description=tr("step"),
                               continuous_update=False)

    def show(change=None):
        with out:
            out.clear_output(wait=True)
            fig, (ax, key) = plt.subplots(1, 2, figsize=_figsize((6.2, 3.6)), gridspec_kw={"width_ratios": [1, 0.85]})
            draw_frame(frames[slider.value], ax, n)
            draw_key(key, n)
            fig.tight_layout()
            plt.show()
    slider.observe(show, names="value")
    box = widgets.VBox([slider, out])
    display(box)
    show()
    return box


def draw_bytes_vs_n(rows: list, ax=None):
    """Bytes sent per rank divided by S against N: every rank's measurement as a point, the
    formulas as lines (ring 2(N-1)/N, naive root N-1, naive others 1)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2) if _on_slide() else (6.4, 4))   # slide: legend outside
    ns = sorted({r["world_size"] for r in rows})
    grid = [x / 10 for x in range(int(min(ns) * 10), int(max(ns) * 10) + 1)]
    slide = _on_slide()                              # larger text: short labels, legend outside
    ax.plot(grid, [2 * (x - 1) / x for x in grid], color="#2a9d5c", label=tr_fig("ring formula 2(N-1)/N"))
    ax.plot(grid, [x - 1 for x in grid], color="#c0392b", label=tr_fig("naive root N-1") if slide else tr_fig("naive root formula N-1"))
    ax.axhline(1, color="#7f8c8d", ls=":", label=tr_fig("naive others 1") if slide else tr_fig("naive non-root formula 1"))
    ax.axhline(2, color="#2a9d5c", ls="--", lw=0.8, label=tr_fig("ring limit 2 (N large)"))
    for op, colour, marker, dx in (("ring_all_reduce", "#2a9d5c", "o", -0.12), ("naive_all_reduce", "#c0392b", "s", 0),
                                   ("torch_all_reduce", "#34495e", "x", 0.12)):
        pts = [(r["world_size"] + dx + 0.04 * (r["rank"] - 1.5), r["sent"] / r["bytes"]) for r in rows if r["op"] == op]
        if pts:
            ax.scatter(*zip(*pts), color=colour, marker=marker, zorder=3, s=60 if slide else 26,
                       label=tr_fig("{op}: measured", op=op.replace('_all_reduce', '')) if slide
                       else tr_fig("{op}: measured, each rank", op=op))
    ax.set_xticks(ns)
    ax.set_xlabel(tr_fig("number of ranks N"))
    ax.set_ylabel(tr_fig("bytes sent by a rank / S"))
    ax.set_title(tr_fig("bytes per rank in one all-reduce of S bytes") if slide else
                 tr_fig("traffic per rank in one all-reduce of S bytes (kernel TCP counters)"))
    ax.grid(alpha=0.3)
    if slide:
        ax.legend(fontsize=_fs(7), loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.legend(fontsize=_fs(7))
    return ax
