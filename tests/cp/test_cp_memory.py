"""A whole transformer layer under context parallelism: the bytes each rank keeps for backward
(autograd's saved-tensor hooks) equal Korthikanti et al.'s per-layer formula at s/cp plus the
named extras, to the byte; ring attention never holds more than one block of scores."""
import pytest

from labkit.cp.activations import formula, measure_layer

pytestmark = pytest.mark.cluster

CASES = [(64, "ring", "contiguous"), (67, "ring", "zigzag"), (64, "allgather", "zigzag")]


def _measure_all(cases):
    return [measure_layer(seq=s, method=m, layout=lay) for s, m, lay in cases]


def test_layer_memory_equals_formula_at_s_over_cp(cluster):
    n = cluster.world_size
    for rank, rows in enumerate(cluster.run(_measure_all, CASES)):
        for (s, m, lay), r in zip(CASES, rows):
            assert r["measured"] == r["total"], (n, rank, s, m, lay, r)
            if m == "ring":   # one block of scores at a time, never the rank's rows against every key
                assert r["largest score block"] <= r["scores, one block"] < r["scores, own rows"]


def test_memory_falls_with_cp_degree():
    """Pure: Korthikanti's term at s/cp is the one-device term over cp; ring's extras fall too,
    all-gather's gathered K/V do not."""
    one = formula(256, 1)
    for cp in (2, 4, 8):
        ring, ag = formula(256, cp), formula(256, cp, method="allgather")
        assert ring["korthikanti s/cp"] * cp == one["korthikanti s/cp"]
        assert ring["total"] * cp == one["total"]
        assert ag["total"] - ring["total"] == 2 * 4 * (256 - 256 // cp) * 64
