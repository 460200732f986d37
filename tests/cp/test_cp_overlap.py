"""The live ring-attention timeline: what each rank records (every block computed, every transfer
posted before the computation it overlaps, every wait after it), what reaches the notebook while
the step runs (labkit.emit), and what the figure draws. No timing bound: only order and counts."""
import matplotlib
import pytest

from labkit.cp.overlap import LiveTimeline, summary
from labkit.cp.runs import traced_step

matplotlib.use("Agg")
pytestmark = pytest.mark.cluster


def _check_rank(ev, n):
    fwd = [e for e in ev if e[0] == "forward"]
    bwd = [e for e in ev if e[0] == "backward"]
    count = lambda es, k: sum(1 for e in es if e[2] == k)   # noqa: E731
    assert (count(fwd, "compute"), count(fwd, "transfer"), count(fwd, "wait")) == (n, n - 1, n - 1)
    # backward: K/V again (n - 1) and each block's dK/dV accumulator (n)
    assert (count(bwd, "compute"), count(bwd, "transfer"), count(bwd, "wait")) == (n, 2 * n - 1, 2 * n - 1)
    for t in range(n - 1):
        comp = next(e for e in fwd if e[1] == t and e[2] == "compute")
        tr = next(e for e in fwd if e[1] == t and e[2] == "transfer")
        wait = next(e for e in fwd if e[1] == t and e[2] == "wait")
        assert tr[3] <= comp[3] <= comp[4] <= wait[3] <= wait[4] == tr[4], (t, comp, tr, wait)
    assert max(e[4] for e in fwd) <= min(e[3] for e in bwd)


def test_live_timeline_events_and_figure(cluster):
    n = cluster.world_size
    with LiveTimeline(cluster) as live:
        res = cluster.run(traced_step, seq=8 * n, causal=False, layout="contiguous", heads=2, live=True)
    got = live.per_rank()
    assert len(got) == n
    for r in range(n):
        want = sorted(res[r]["events"], key=lambda e: e[3])
        _check_rank(want, n)
        assert [e[:3] for e in got[r]] == [e[:3] for e in want], r
        assert [e[3:] for e in got[r]] == [e[3:] for e in want], r      # one clock offset: to the bit
        # drawn live: the first records left the rank before its step ended
        assert min(live.sent[r]) < max(e[4] for e in want), r
    rows = summary(got)
    assert [row["messages"] for row in rows] == [3 * n - 2] * n
    assert all(0 <= row["wait"] <= row["transfer"] for row in rows)
    fig = live.figure()
    bars = [p for c in fig.axes[0].collections for p in c.get_paths()]
    assert len(bars) == sum(len(ev) for ev in got)      # one bar per record
    t0 = min(e[3] for ev in got for e in ev)
    lefts = sorted(round(float(p.vertices[:, 0].min()), 6) for p in bars)
    assert lefts == sorted(round((e[3] - t0) * 1e3, 6) for ev in got for e in ev)
