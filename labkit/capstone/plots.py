"""The capstone's curves: every layout's and wrong variant's loss against one process's.

    fig = curves_figure(ref["losses"], {"2 x 2 x 2": losses, ...}, loss_bounds(cfg, ref))
"""
from labkit.i18n import tr_fig

__all__ = ["curves_figure"]


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
