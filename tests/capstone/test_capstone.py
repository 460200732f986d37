"""Module 14's trainer (labkit.capstone): DP x PP x TP on gloo ranks, every step's loss against
one process within a derived bound (labkit.capstone.loss_bounds), and the wrong variants outside it."""
import pytest

import labkit

pytestmark = pytest.mark.cluster

STEPS = 3


@pytest.fixture(scope="module")
def cluster8():
    with labkit.Cluster(8, backend="gloo", spares=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def ref():
    from labkit.capstone import Config, reference
    return reference(Config(), steps=STEPS)


def _ratios(res, ref, layout, norm=False):
    """observed / bound per step of the loss; norm=True: of step 0's gradient norm (one number)."""
    from labkit.capstone import Config, loss_bounds
    from labkit.capstone.bounds import norm_bound, ratios
    losses = res[0]["losses"]
    assert all(r["losses"] == losses for r in res), [r["losses"] for r in res]   # every rank agrees
    if norm:
        return abs(res[0]["norms"][0] / ref["norms"][0] - 1) / norm_bound(Config(), ref, layout["dp"])
    return ratios([abs(a - b) for a, b in zip(losses, ref["losses"])], loss_bounds(Config(), ref, **layout))


def _run(cluster, layout, wrong=None, zero=False, sp=False):
    from labkit.capstone import Config, train
    return cluster.run(train, Config(), steps=STEPS, wrong=wrong, zero=zero, sequence_parallel=sp,
                       **layout)


def test_2x2x2_losses_equal_one_process(cluster8, ref):
    layout = dict(dp=2, pp=2, tp=2)
    res = _run(cluster8, layout)
    r, n = _ratios(res, ref, layout), _ratios(res, ref, layout, norm=True)
    print(f"\n2x2x2 observed / bound per step: {[f'{x:.1e}' for x in r]}; step 0's norm: {n:.1e}")
    assert max(r) <= 1 and n <= 1, (r, n)


def test_2x2x2_with_zero2_equals_one_process(cluster8, ref):
    """The data-parallel wrapping as ZeRO-2 by hand (reduce-scatter, sharded step, all-gather)."""
    layout = dict(dp=2, pp=2, tp=2)
    res = _run(cluster8, layout, zero=True)
    r, n = _ratios(res, ref, layout), _ratios(res, ref, layout, norm=True)
    print(f"\n2x2x2 ZeRO-2 observed / bound per step: {[f'{x:.1e}' for x in r]}; step 0's norm: {n:.1e}")
    assert max(r) <= 1 and n <= 1, (r, n)


def test_2x2x2_with_sequence_parallelism_equals_one_process(cluster8, ref):
    """TPBlock's sequence parallelism: s / t positions per TP rank between the TP regions, the
    replicated parameters' gradients summed over TP (the rule notebook 14's exercise checks)."""
    layout = dict(dp=2, pp=2, tp=2)
    res = _run(cluster8, layout, sp=True)
    r, n = _ratios(res, ref, layout), _ratios(res, ref, layout, norm=True)
    print(f"\n2x2x2 SP observed / bound per step: {[f'{x:.1e}' for x in r]}; step 0's norm: {n:.1e}")
    assert max(r) <= 1 and n <= 1, (r, n)


@pytest.mark.parametrize("layout", [dict(dp=1, pp=2, tp=2), dict(dp=2, pp=2, tp=1)],
                         ids=["pp2xtp2", "dp2xpp2"])
def test_4_rank_losses_equal_one_process(cluster4, ref, layout):
    res = _run(cluster4, layout)
    r, n = _ratios(res, ref, layout), _ratios(res, ref, layout, norm=True)
    print(f"\n{layout} observed / bound per step: {[f'{x:.1e}' for x in r]}; step 0's norm: {n:.1e}")
    assert max(r) <= 1 and n <= 1, (r, n)


def test_wrong_variants_differ_beyond_the_bound(cluster8, ref):
    from labkit.capstone import WRONG
    from labkit.capstone.trainer import WRONG_SP
    layout = dict(dp=2, pp=2, tp=2)
    worst = {w: max(_ratios(_run(cluster8, layout, w, sp=w in WRONG_SP), ref, layout))
             for w in WRONG + WRONG_SP}
    print("\nwrong variants, largest observed / bound: " + ", ".join(f"{w}: {x:.1f}" for w, x in worst.items()))
    assert all(x > 1 for x in worst.values()), worst


def test_the_grid_is_picotrons_view():
    """labkit.capstone.groups' Layout is torch.arange(world).view(dp, pp, tp), TP fastest
    (notebook 14's exercise and labkit.check.capstone use the same order)."""
    import torch
    from labkit.nd.layout import Layout
    dp, pp, tp = 2, 2, 2
    view = torch.arange(dp * pp * tp).view(dp, pp, tp)
    for i, d in enumerate(("dp", "pp", "tp")):
        want = sorted(view.movedim(i, -1).reshape(-1, view.shape[i]).tolist())
        assert sorted(Layout(dp=dp, pp=pp, tp=tp).groups(d)) == want, d


def test_curves_figure_draws_every_run_and_the_bound():
    """labkit.capstone.plots.curves_figure from recorded numbers (no ranks)."""
    import matplotlib
    matplotlib.use("Agg")
    from labkit.capstone.plots import curves_figure
    ref, bounds = [5.56, 5.44, 5.02], [1.3e-3, 3.8e-3, 1.1e-2]
    fig = curves_figure(ref, {"2 x 2 x 2": [5.56, 5.44, 5.02], "wrong": [11.1, 10.9, 10.0]}, bounds)
    left, right = fig.axes
    assert len(left.lines) == 3 and len(right.lines) == 3            # one process + 2 runs; 2 + bound
    assert list(right.lines[-1].get_ydata()) == bounds
    assert len(fig.legends[0].get_texts()) == 4
