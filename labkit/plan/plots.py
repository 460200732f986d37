"""Pictures of a 3D layout: nodes as boxes, each rank coloured by its group along TP, PP, DP."""
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch, Rectangle

from labkit import figtext
from labkit.i18n import N_, tr_fig
from labkit.nd.layout import Layout

_TITLES = {"tp": N_("TP groups"), "pp": N_("PP groups (pipelines)"), "dp": N_("DP groups (replicas)")}


def draw_layout(layout: Layout, dims=("tp", "pp", "dp"), cols: int = 4):
    """One panel per dimension; in each, every node is a box of its ranks, and ranks of the same
    group share a colour. Text sizes follow rcParams (labkit.figtext). Returns the figure."""
    n_nodes, g = layout.nodes, layout.gpus_per_node
    rows_per_node = -(-g // cols)
    width, height = max(6, 2.6 * n_nodes), 1.9 * len(dims) * rows_per_node / 2 + 0.6
    if figtext.slides():                 # larger text: the deck's width, room for the titles
        width, height = figtext.figsize((width, height))[0], (0.55 * rows_per_node + 0.9) * len(dims) + 0.8
    fig, axes = plt.subplots(len(dims), 1, figsize=(width, height), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, dim in zip(axes[:, 0], dims):
        groups = layout.groups(dim)
        colour = {r: cmap(i % 20) for i, grp in enumerate(groups) for r in grp}
        for node in range(n_nodes):
            x0 = node * (cols + 1)
            ax.add_patch(FancyBboxPatch((x0 - 0.15, -0.15), cols + 0.3 - 0.0, rows_per_node + 0.3,
                                        boxstyle="round,pad=0.05", fill=False, lw=1.5, ec="0.3"))
            ax.text(x0 + cols / 2, rows_per_node + 0.35, tr_fig("node {node}", node=node), ha="center", va="bottom",
                    fontsize=figtext.size(9))
            for k in range(g):
                r = node * g + k
                if r >= layout.world_size:
                    break
                x, y = x0 + k % cols, rows_per_node - 1 - k // cols
                ax.add_patch(Rectangle((x + 0.05, y + 0.05), 0.9, 0.9, color=colour[r]))
                ax.text(x + 0.5, y + 0.5, str(r), ha="center", va="center", fontsize=figtext.size(8))
        where = tr_fig("crosses nodes") if layout.spans_nodes(dim) else tr_fig("inside each node")
        key = "" if figtext.slides() else tr_fig(" (colour = group, number = global rank)")
        ax.set_title(tr_fig("{groups}: {k} of {size} ranks, {where}{key}", groups=tr_fig(_TITLES[dim]),
                            k=len(groups), size=len(groups[0]), where=where, key=key),
                     fontsize=figtext.size(9), loc="left")
        ax.set_xlim(-0.4, n_nodes * (cols + 1) - 0.6)
        ax.set_ylim(-0.4, rows_per_node + 0.9)
        ax.set_aspect("equal")
        ax.axis("off")
    fig.suptitle(tr_fig("dp {dp} x pp {pp} x tp {tp} = {n} GPUs, order {order} (fastest first)",
                        dp=layout.dp, pp=layout.pp, tp=layout.tp, n=layout.world_size, order=layout.order) +
                 ("\n" + tr_fig("colour = group, number = global rank") if figtext.slides() else ""),
                 fontsize=figtext.size(10))
    fig.tight_layout()
    return fig
