"""The capstone's pictures (layer 4): every layout's and wrong variant's loss against one process's;
the measurements shown, the tables with their verdicts, and the Gantt of one step across every
rank, in the colours of notebook 07's pipeline Gantt.

    fig = curves_figure(ref["losses"], {"2 x 2 x 2": losses, ...}, loss_bounds(cfg, ref))
    res = cluster.run(record_step, cfg, dp=2, pp=2, tp=2)    # labkit.capstone.measure
    traffic_report(res, cfg, 2, 2, 2)      # a table, and one verdict line per row
    memory_report(res, cfg, 2, 2, 2)
    step_gantt(res, path="gantt.png")
"""
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from labkit.capstone.measure import memory_rows, traffic_rows
from labkit.i18n import tr, tr_fig
from labkit.pipeline.plots import COLOURS
from labkit.tables import Table
from labkit.verdict import verdict

__all__ = ["curves_figure", "traffic_report", "memory_report", "step_gantt", "speed_report"]

EXTRA = {"tp": "#f58518", "dp": "#b279a2", "pp": "#9d755d", "wait": "#bab0ac"}


def _span(lo_hi) -> str:
    lo, hi = lo_hi
    return f"{lo}" if lo == hi else f"{lo}..{hi}"


def traffic_report(results, cfg, dp, pp, tp) -> Table:
    """Bytes per step per dimension, counted on the ranks, against the formulas; one verdict
    per row (MISS where a rank's count differs from its formula)."""
    rows = traffic_rows(results, cfg, dp, pp, tp)
    for r in rows:
        verdict(r["ok"], tr("{dim} {what}, stage {stage} (ranks {ranks}): counted {calls} calls, "
                            "{got} B; formula {fc} calls, {fb} B",
                            dim=r["dim"].upper(), what=tr(r["what"]), stage=r["stage"],
                            ranks=", ".join(map(str, r["ranks"])), calls=_span(r["calls"]),
                            got=_span(r["bytes"]), fc=r["formula"][0], fb=r["formula"][1]))
    body = [[r["dim"].upper(), tr(r["what"]), r["stage"], _span(r["calls"]), _span(r["bytes"]),
             r["formula"][1], int(r["sent"]), "" if r["planner"] is None else int(r["planner"])]
            for r in rows]
    return Table(["dim", "what", "stage", "calls", "payload B (counted)", "payload B (formula)",
                  "sent B (ring)", "planner sent B"], body, align="llrrrrrr",
                 title=tr("bytes per rank in one step, dp {dp} x pp {pp} x tp {tp}", dp=dp, pp=pp, tp=tp),
                 notes=[tr("sent: what the ring formula puts on the wire for the counted payload "
                           "(all-reduce over n ranks: 2 (n-1)/n of it); the planner divides the "
                           "parameters evenly over the stages, the trainer keeps the embeddings on "
                           "the first and the head on the last")])


def memory_report(results, cfg, dp, pp, tp) -> Table:
    """Memory per rank by category against 4 B x the parameters the rank holds (and the
    planner's even split beside it); one verdict per stage and category."""
    rows = memory_rows(results, cfg, dp, pp, tp)
    seen = {}
    for r in rows:
        seen.setdefault((r["stage"], r["category"]), []).append(r)
    for (stage, cat), rs in seen.items():
        if rs[0]["formula"] is None:
            continue
        verdict(all(r["ok"] for r in rs),
                tr("{cat}, stage {stage}: counted {got} B on ranks {ranks}; formula {want} B",
                   cat=tr(cat), stage=stage, got=_span((min(r["bytes"] for r in rs), max(r["bytes"] for r in rs))),
                   ranks=", ".join(str(r["rank"]) for r in rs), want=rs[0]["formula"]))
    body = [[stage, tr(cat), _span((min(r["bytes"] for r in rs), max(r["bytes"] for r in rs))),
             "" if rs[0]["formula"] is None else rs[0]["formula"],
             "" if rs[0]["planner"] is None else int(rs[0]["planner"])]
            for (stage, cat), rs in seen.items()]
    return Table(["stage", "category", "counted B", "formula B", "planner B"], body, align="llrrr",
                 title=tr("memory per rank by category, dp {dp} x pp {pp} x tp {tp}", dp=dp, pp=pp, tp=tp),
                 notes=[tr("plain SGD keeps no optimizer state; the activations are the tensors "
                           "autograd saved for backward over the step's micro-batches, shown without "
                           "a formula (the planner's is for 16-bit training)")])


def step_gantt(results, path: str = None, title: str = None):
    """One step on every rank: forward (F) and backward (B) per micro-batch, the TP all-reduces
    (a strip on top), the waits for a pipeline neighbour, the DP all-reduce and the scalars."""
    t0 = min(e[2] for r in results for e in r["events"])
    ranks = sorted(results, key=lambda r: r["rank"])
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(ranks) + 1.6))
    for r in ranks:
        y = len(ranks) - 1 - r["rank"]
        for kind, dim, a, b, label in r["events"]:
            x, w = (a - t0) * 1e3, max((b - a) * 1e3, 1e-3)
            if kind in ("F", "B"):
                ax.broken_barh([(x, w)], (y + 0.1, 0.8), facecolor=COLOURS[kind], edgecolor="white")
                ax.text(x + w / 2, y + 0.4, label, ha="center", va="center", fontsize=8, color="white",
                        zorder=4)
            elif kind.endswith("wait"):
                ax.broken_barh([(x, w)], (y + 0.1, 0.8), facecolor=EXTRA["wait"], hatch="//",
                               edgecolor="white")
            elif dim == "tp" and label == "activations all-reduce":
                ax.broken_barh([(x, w)], (y + 0.7, 0.2), facecolor=EXTRA["tp"], zorder=3)
            else:
                ax.broken_barh([(x, w)], (y + 0.1, 0.8), facecolor=EXTRA.get(dim, "black"),
                               edgecolor="black", linewidth=0.3)
    ax.set_yticks([len(ranks) - 1 - r["rank"] + 0.5 for r in ranks])
    ax.set_yticklabels([tr_fig("rank {r} (dp {d}, pp {p}, tp {t})", r=r["rank"], d=r["coords"][0],
                               p=r["coords"][1], t=r["coords"][2]) for r in ranks])
    ax.set_xlabel(tr_fig("time since the step's first action (ms), measured"))
    ax.set_title(title or tr_fig("one training step on {n} ranks", n=len(ranks)))
    handles = [Patch(color=COLOURS["F"], label=tr_fig("forward (number: micro-batch)")),
               Patch(color=COLOURS["B"], label=tr_fig("backward")),
               Patch(color=EXTRA["tp"], label=tr_fig("TP all-reduce (activations)")),
               Patch(facecolor=EXTRA["wait"], hatch="//", label=tr_fig("waiting for a pipeline neighbour")),
               Patch(color=EXTRA["dp"], label=tr_fig("DP all-reduce (gradients; loss)")),
               Patch(color=EXTRA["pp"], label=tr_fig("PP all-reduce (norm, loss)"))]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, fontsize=8,
              frameon=False)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def speed_report(rows) -> Table:
    """Tokens per second per layout, measured here in one run (as ratios to the first), beside
    the order the planner predicts for the same model on 8 H100s."""
    measured = sorted(rows, key=lambda r: -r["tokens_s"])
    predicted = sorted(rows, key=lambda r: -r["predicted"])
    name = lambda r: "dp {} x pp {} x tp {}".format(*r["layout"])   # noqa: E731
    body = [[name(r), f"{r['ratio']:.2f}", measured.index(r) + 1, f"{r['predicted'] / predicted[0]['predicted']:.2f}",
             predicted.index(r) + 1] for r in rows]
    return Table(["layout", "tokens/s here, vs the first", "order here", "planner on 8 H100, vs its best",
                  "planner's order"], body, align="lrrrr",
                 title=tr("tokens per second per layout, {n} ranks", n=8),
                 notes=[tr("here: 8 ranks share this machine's CPU cores, so a layout's speed is how "
                           "its ranks take turns on them, not how fast its links are; the planner "
                           "counts GPUs that compute in parallel and links of set bandwidths. Only "
                           "a machine with 8 GPUs can say which order holds there")])


def curves_figure(reference: list, runs: dict, bounds: list, title: str = ""):
    """Left: the loss per step, one process dashed, each run ({label: losses}) a line. Right: each
    run's |loss - one process's| per step on a log scale and the derived bound (dotted): under it
    the run equals one process, above it it does not. One legend for both, below."""
    import matplotlib.pyplot as plt
    steps = list(range(len(reference)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(steps, reference, "k--", lw=2.5, label=tr_fig("one process"), zorder=3)
    tiny = min(bounds) * 1e-6                     # |diff| 0 drawn here (a log axis has no 0)
    for k, (label, losses) in enumerate(runs.items()):
        color = f"C{k}"
        left.plot(steps, losses, "o-", color=color, label=label)
        diffs = [max(abs(a - b), tiny) for a, b in zip(losses, reference)]
        right.plot(steps, diffs, "o-", color=color, label=label)
    right.plot(steps, bounds, "k:", lw=2, label=tr_fig("derived bound (equal to one process below it)"))
    right.set_yscale("log")
    for ax in (left, right):
        ax.set_xlabel(tr_fig("step"))
        ax.set_xticks(steps)
    left.set_ylabel(tr_fig("loss (nats per byte)"))
    right.set_ylabel(tr_fig("|loss - one process's loss|"))
    left.set_title(tr_fig("the loss per step"))
    right.set_title(tr_fig("distance from one process"))
    handles, labels = left.get_legend_handles_labels()
    h2, l2 = right.get_legend_handles_labels()
    handles, labels = handles + h2[-1:], labels + l2[-1:]
    fig.suptitle(title or tr_fig("every layout on one process's curve; the wrong variants leave it"))
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    return fig
