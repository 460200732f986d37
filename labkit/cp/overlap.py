"""Overlap in ring attention, live: each rank's block computations, transfers and waits drawn in
the cell while the step runs (the style of labkit.ddp.timeline and labkit.pipeline's live Gantt).

    with LiveTimeline(cluster, title="...") as live:
        res = cluster.run(labkit.cp.runs.traced_step, seq=4096, causal=False, live=True)
    summary(live.per_rank())        # per rank: compute, transfer, exposed wait, hidden share

A transfer is posted before the block's attention and waited for after it: the part of the
transfer the wait still sees is exposed, the rest was hidden behind the computation. Ranks emit
their records with labkit.emit after forward and after backward (labkit.cp.ring.flush).
"""
from labkit.livefig import LiveFigure

KINDS = ("compute", "transfer", "wait")


class LiveTimeline(LiveFigure):
    """Notebook side: one row per rank, redrawn as ring steps end; the last picture stays."""

    def __init__(self, cluster, title: str = None, fps: float = 3.0):
        super().__init__(cluster, fps)
        self.title = title
        self.events = {}                 # rank -> [(phase, step, kind, start, end)]
        self.sent = {}                   # rank -> [wall time each event left the rank]

    def _take(self, event) -> bool:
        d = event.data
        if d.get("cp") not in KINDS:
            return False
        self.events.setdefault(event.rank, []).append(
            (d["phase"], d["step"], d["cp"], d["start"], d["end"]))
        self.sent.setdefault(event.rank, []).append(event.time)
        return True

    def per_rank(self) -> list:
        n = max(self.events, default=-1) + 1
        return [sorted(self.events.get(r, []), key=lambda e: e[3]) for r in range(n)]

    def figure(self):
        import matplotlib.pyplot as plt
        from labkit.cp.plots import timeline
        per = self.per_rank() or [[]]
        fig, ax = plt.subplots(figsize=(9, 0.6 * len(per) + 1.6))
        from labkit.i18n import tr_fig
        timeline(per, ax=ax, title=tr_fig("ring attention, live") if self.title is None else self.title)
        fig.tight_layout()
        return fig


def summary(per_rank: list) -> list:
    """Per rank, seconds: computing, transfers in flight (posted -> seen done), waiting (the
    exposed part), and the share of transfer time hidden behind compute, 1 - wait / transfer."""
    rows = []
    for ev in per_rank:
        tot = {k: sum(e[4] - e[3] for e in ev if e[2] == k) for k in KINDS}
        tot["hidden share"] = 1 - tot["wait"] / tot["transfer"] if tot["transfer"] > 0 else 1.0
        tot["messages"] = sum(1 for e in ev if e[2] == "transfer")
        rows.append(tot)
    return rows
