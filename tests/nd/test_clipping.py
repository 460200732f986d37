"""The global gradient norm over DP (ZeRO-2 shards), TP and PP on 2 x 2 layouts of 4 gloo ranks."""
import pytest

pytestmark = pytest.mark.cluster

LAYOUTS = [dict(dp=2, pp=1, tp=2), dict(dp=1, pp=2, tp=2), dict(dp=2, pp=2, tp=1)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=["dp2xtp2", "pp2xtp2", "dp2xpp2"])
def test_global_norm_and_clipping_equal_one_process(cluster4, layout):
    from labkit.nd.clipping import WRONG
    for r in cluster4.run(clip_parity_runner, layout):
        n, bound = r["norms"], r["bounds"]           # derived: labkit.nd.clipping.parity_bounds
        assert abs(n["right"] / n["one process"] - 1) <= bound["norm"], (layout, r)
        assert r["clipped shard diff"] <= bound["clipped"], (layout, r)
        missing = {"no DP sum": layout["dp"] > 1, "no TP sum": layout["tp"] > 1,
                   "no PP sum": layout["pp"] > 1, "replicas counted t times": layout["tp"] > 1}
        for name in WRONG:            # each missing reduction is wrong where its dimension exists
            off = abs(n[name] / n["one process"] - 1)
            # a missing reduction must fall outside the right norm's bound (1.2 %; they are 7-32 %)
            assert (off > bound["norm"]) if missing[name] else (off <= bound["norm"]), (layout, name, r)


def test_the_bounds_scale_holds_on_one_process():
    """labkit.nd.clipping.parity_bounds takes every value clip_parity computes to stay below
    labkit.tp.parity.SCALE; magnitudes do not depend on the CPU (13.7 here)."""
    from labkit.tp.parity import SCALE, batch, reference_blocks
    ref = reference_blocks(2, 32, 4)
    x, w = batch(4, 8, 32)
    x.requires_grad_()
    y = ref(x)
    (y * w).sum().backward()                           # dp = 1: the largest gradients
    assert max(v.abs().max().item() for v in [y, x.grad] + [p.grad for p in ref.parameters()]) <= SCALE


def clip_parity_runner(layout):
    from labkit.nd.parity import clip_parity
    return clip_parity(**layout)


# Tolerances derived, not tuned (labkit.nd.clipping.ep_bounds, tied_bounds: labkit.numerics.chain_bound
# over the gradient's reductions, scale = the largest value one process computes, then the norm's
# and the clipped gradient's bounds as parity_bounds). A wrong norm's error is bounded alike (its
# elements are the same gradients, the dense or tied ones counted twice: in numel), against what
# that mistake predicts from the one process's parts; summed over CP adds one all-reduce of 2
# squares and a root in fp32 (4 u). A wrong norm misses or repeats at least 1 % of the total.
@pytest.mark.parametrize("cp", [1, 2], ids=["ep2xdp2", "ep2xcp2"])
def test_ep_cp_norm_equals_one_process_and_the_wrong_ones_differ(cluster4, cp):
    res = cluster4.run(ep_runner, cp)
    for r in res:
        n, one, bound = r["norms"], r["norms"]["one process"], r["bounds"]
        assert abs(n["right"] / one - 1) <= bound["norm"], r
        assert r["grad diff"] <= bound["gradient"] and r["clipped grad diff"] <= bound["clipped"], r
        assert n["no EP sum"] < one * 0.99, r                   # only this rank's experts
        # the dense weights (attention, router) counted on both EP ranks: their part twice
        assert n["dense counted on every EP rank"] == pytest.approx((one ** 2 + r["dense norm"] ** 2) ** 0.5, rel=bound["norm"])
        assert n["dense counted on every EP rank"] > one * 1.01, r
        if cp == 2:                                              # replicas added: sqrt(2) too large
            assert n["summed over CP"] == pytest.approx(2 ** 0.5 * one, rel=bound["norm"] + 4 * 2.0 ** -24), r
        else:
            assert "summed over CP" not in n
    assert len({r["norms"]["no EP sum"] for r in res}) == 2      # each EP rank sees another part


def test_tied_embedding_counted_once(cluster4):
    for r in cluster4.run(tied_runner):
        n, one, bound = r["norms"], r["norms"]["one process"], r["bounds"]
        assert abs(n["right"] / one - 1) <= bound["norm"], r
        assert r["grad diff"] <= bound["gradient"], r
        assert n["tied embedding counted twice"] == pytest.approx((one ** 2 + r["tied norm"] ** 2) ** 0.5, rel=bound["norm"])
        assert n["tied embedding counted twice"] > one * 1.005, r


def ep_runner(cp):
    from labkit.nd.parity import clip_parity_ep
    return clip_parity_ep(cp=cp)


def tied_runner():
    from labkit.nd.parity import tied_parity
    return tied_parity()
