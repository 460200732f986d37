"""An ipywidgets control over schedules (layer 4): pick schedule, p, m, v; see it at once.

    explorer = schedule_explorer(cluster)      # simulated Gantt + bubble, redrawn on every change
    explorer.run()                             # what the button does: run it on the cluster and
                                               # lay the measured chart beside its simulated twin
The charts are inline PNGs inside an Output widget; `explorer.figure()` returns the current
simulated one for a static copy.
"""
import matplotlib.pyplot as plt

from labkit.i18n import N_, tr, tr_fig
from labkit.pipeline.plots import gantt, side_by_side
from labkit.pipeline.formulas import bubble_over_ideal, bubble_ratio
from labkit.pipeline.schedules import build
from labkit.pipeline.simulate import held_in_order, simulate

__all__ = ["schedule_explorer", "Explorer"]

CHOICES = [("GPipe", "gpipe"), ("1F1B", "1f1b"), (N_("interleaved 1F1B"), "interleaved"), ("ZB-H1", "zb-h1")]


class Explorer:
    def __init__(self, cluster=None, pad: float = 0.01):
        import ipywidgets as w
        self.cluster, self.pad = cluster, pad
        p0 = cluster.world_size if cluster is not None else 4
        self.kind = w.Dropdown(options=[(tr(label), key) for label, key in CHOICES], value="1f1b",
                               description=tr("schedule"))
        self.p = w.IntSlider(value=p0, min=1, max=8, description=tr("stages p"))
        self.m = w.IntSlider(value=8, min=1, max=32, description=tr("micro-batches m"))
        self.v = w.IntSlider(value=2, min=1, max=4, description=tr("chunks v"))
        self.button = w.Button(description=tr("run on the cluster"), button_style="primary")
        self.out, self.measured = w.Output(), w.Output()
        for ctl in (self.kind, self.p, self.m, self.v):
            ctl.observe(lambda _: self.draw(), names="value")
        self.button.on_click(lambda _: self.run())
        self.box = w.VBox([w.HBox([self.kind, self.button]), w.HBox([self.p, self.m, self.v]),
                           self.out, self.measured])

    def schedule(self):
        return build(self.kind.value, self.p.value, self.m.value, chunks=self.v.value)

    def figure(self):
        """The simulated Gantt for the current choice (times per action divided by v)."""
        s = self.schedule()
        k = 1.0 / s.chunks
        t = simulate(s, forward=k, backward=k, weight=k)
        fig, ax = plt.subplots(figsize=(10, 0.55 * s.stages + 1.4))
        gantt(t, ax)
        held = ", ".join(f"{h:g}" for h in held_in_order(s))
        ideal = "(p-1)/(vm)" if s.chunks > 1 else "(p-1)/m"
        ax.text(1.0, -0.32, tr_fig("activations held at the peak per stage (micro-batches' worth): {held}; "
                                   "bubble over ideal (Megatron) {ideal} = {ratio:.1%}", held=held, ideal=ideal,
                                   ratio=bubble_over_ideal(s.stages, s.microbatches, s.chunks)),
                transform=ax.transAxes, ha="right", fontsize=8)
        fig.tight_layout()
        return fig

    def draw(self) -> None:
        from IPython.display import clear_output, display
        with self.out:
            clear_output(wait=True)
            try:
                fig = self.figure()
            except ValueError as exc:            # e.g. interleaved with m not a multiple of p
                print(tr("cannot build this schedule: {error}", error=exc))
                return
            display(fig)
            plt.close(fig)

    def run(self):
        """Run the chosen schedule on the cluster (padded compute) and show the measured Gantt above
        its simulated twin on one time axis. Returns the measured Timeline."""
        from IPython.display import clear_output, display
        from labkit.pipeline.executor import run_schedule
        from labkit.pipeline.timeline import simulated_twin, timeline_of
        with self.measured:
            clear_output(wait=True)
            if self.cluster is None or self.cluster.world_size != self.p.value:
                n = None if self.cluster is None else self.cluster.world_size
                print(tr("the cluster has {n} ranks: set p = {n} to run this schedule on it", n=n))
                return None
            s = self.schedule()
            t = timeline_of(self.cluster.run(run_schedule, s, pad=self.pad, live=False), s)
            twin = simulated_twin(t, s)
            fig = side_by_side(t, twin)
            fig.axes[1].set_title(tr_fig("simulated with this run's measured times: bubble {twin:.1%} "
                                         "(measured {measured:.1%}, formula {formula:.1%})", twin=twin.bubble,
                                         measured=t.bubble,
                                         formula=bubble_ratio(s.stages, s.microbatches, s.chunks)),
                                  fontsize=9)
            display(fig)
            plt.close(fig)
            return t


def schedule_explorer(cluster=None, pad: float = 0.01) -> Explorer:
    """Show the control and the simulated Gantt for its first choice; returns the Explorer."""
    from IPython.display import display
    e = Explorer(cluster, pad)
    display(e.box)
    e.draw()
    return e
