"""The pictures of tensor parallelism (layer 4): the bytes of the logits and of what the loss keeps
for backward, measured beside the formula (`labkit.tp.split.vocab_memory`).

    memory_figure(cluster.run(vocab_memory)[0], formula, "rank 0 of 4")
"""


def memory_figure(measured: dict, formula: dict, title: str = ""):
    """Bars per way of computing the loss: logits held and bytes the loss keeps for backward
    (measured), the formula as a black tick on each bar; one scale for all."""
    import matplotlib.pyplot as plt
    from labkit.i18n import N_, tr_fig
    ways = list(formula)
    title = tr_fig(title) if title else title        # first: the learner's font for the axes
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    width = 0.38
    for j, (what, color) in enumerate(((N_("logits"), "tab:blue"), (N_("saved by the loss"), "tab:orange"))):
        xs = [i + (j - 0.5) * width for i in range(len(ways))]
        ax.bar(xs, [measured[w][what] / 2**20 for w in ways], width, color=color,
               label=tr_fig("{what} (measured)", what=tr_fig(what)))
        ax.scatter(xs, [formula[w][what] / 2**20 for w in ways], marker="_", s=400, color="k", zorder=3,
                   label=tr_fig("formula") if j == 0 else None)
    ax.set_xticks(range(len(ways)), [tr_fig(w) for w in ways])
    ax.set_ylabel(tr_fig("MiB on this rank"))
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
