"""The picture of gradient clipping over a parallel grid (layer 4): each norm a rank computed,
right and with one piece missing, beside one process's.

    norms_figure({"dp 2 x tp 2": cluster.run(clip_parity, dp=2, tp=2)[0]})
"""
from labkit.i18n import tr_fig


def norms_figure(results: dict, title: str = ""):
    """One panel per layout ({name: a rank's clip_parity result}), one x scale: each norm that
    rank computed, green where it equals one process's (dashed line), red where it does not."""
    import matplotlib.pyplot as plt
    keys = [tuple(n for n in r["norms"] if n != "one process") for r in results.values()]
    same = len(set(keys)) == 1                    # one set of bars: one y axis; else labels on each
    fig, axes = plt.subplots(1, len(results), figsize=((3.3 if same else 4.6) * len(results), 3.0),
                             sharex=True, sharey=same)
    for ax, (layout, res), names in zip(list(getattr(axes, "flat", [axes])), results.items(), keys):
        norms, want = res["norms"], res["norms"]["one process"]
        vals = [norms[n] for n in names][::-1]
        ax.barh([tr_fig(n) for n in names[::-1]], vals, color=["tab:green" if abs(v / want - 1) < 1e-6 else "tab:red" for v in vals])
        ax.axvline(want, ls="--", color="k")
        ax.set_title(tr_fig("{layout} (rank {rank})", layout=layout, rank=res["rank"]))
        ax.set_xlabel(tr_fig("gradient norm"))
    fig.suptitle(title or tr_fig("the global gradient norm, right and with one piece missing "
                                 "(dashed: one process; green: equal to it, red: not)"))
    fig.tight_layout()
    return fig
