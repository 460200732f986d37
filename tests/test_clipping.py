"""The global gradient norm over DP (ZeRO-2 shards), TP and PP on 2 x 2 layouts of 4 gloo ranks."""
import pytest

pytestmark = pytest.mark.cluster

LAYOUTS = [dict(dp=2, pp=1, tp=2), dict(dp=1, pp=2, tp=2), dict(dp=2, pp=2, tp=1)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=["dp2xtp2", "pp2xtp2", "dp2xpp2"])
def test_global_norm_and_clipping_equal_one_process(cluster4, layout):
    from labkit.clipping import WRONG
    for r in cluster4.run(clip_parity_runner, layout):
        n = r["norms"]
        assert abs(n["right"] / n["one process"] - 1) < 1e-6, (layout, r)
        assert r["clipped shard diff"] < 1e-5, (layout, r)
        missing = {"no DP sum": layout["dp"] > 1, "no TP sum": layout["tp"] > 1,
                   "no PP sum": layout["pp"] > 1, "replicas counted t times": layout["tp"] > 1}
        for name in WRONG:            # each missing reduction is wrong where its dimension exists
            off = abs(n[name] / n["one process"] - 1)
            assert (off > 0.01) if missing[name] else (off < 1e-6), (layout, name, r)


def clip_parity_runner(layout):
    from labkit.clipping import clip_parity
    return clip_parity(**layout)
