"""The 3D grid and its validation: pure arithmetic, no processes."""
import pytest

from labkit.nd.layout import Coord, Layout, problems, validate
from labkit.plan.traffic import link_times, step_traffic


def test_notes_32_gpus_dp_outermost():
    lay = Layout(dp=2, pp=2, tp=8, gpus_per_node=8)
    assert lay.world_size == 32 and lay.nodes == 4
    assert lay.coords(0) == Coord(0, 0, 0)
    assert lay.coords(13) == Coord(dp=0, pp=1, tp=5)
    assert lay.coords(31) == Coord(dp=1, pp=1, tp=7)
    assert lay.groups("tp")[1] == list(range(8, 16))
    assert lay.group_of(3, "pp") == [3, 11]
    assert lay.group_of(3, "dp") == [3, 19]
    assert not lay.spans_nodes("tp") and lay.spans_nodes("pp") and lay.spans_nodes("dp")
    for r in range(32):
        assert lay.rank_of(*lay.coords(r)) == r
    # every rank in exactly one group per dimension
    for d in ("dp", "pp", "tp"):
        assert sorted(r for g in lay.groups(d) for r in g) == list(range(32))


def test_megatron_order_pp_outermost():
    lay = Layout(dp=2, pp=2, tp=8, gpus_per_node=8, order="megatron")
    assert lay.order == "tp-dp-pp"
    assert lay.coords(8) == Coord(dp=1, pp=0, tp=0)      # next block of 8 is the next DP replica
    assert lay.coords(16) == Coord(dp=0, pp=1, tp=0)     # PP outermost: stage 1 is ranks 16..31
    assert lay.group_of(0, "pp") == [0, 16]
    assert Layout(dp=2, pp=2, tp=2, order="tp-cp-ep-dp-pp").order == "tp-dp-pp"


def test_small_pipeline_stays_in_node_with_dp_outermost():
    notes = Layout(dp=4, pp=2, tp=4, gpus_per_node=8)
    mega = Layout(dp=4, pp=2, tp=4, gpus_per_node=8, order="megatron")
    assert not notes.spans_nodes("pp") and notes.spans_nodes("dp")
    assert mega.spans_nodes("pp") and mega.spans_nodes("dp")   # 2 x 4 ranks per node: both cross
    big_node = Layout(dp=2, pp=2, tp=4, gpus_per_node=8, order="megatron")
    assert not big_node.spans_nodes("dp") and big_node.spans_nodes("pp")


def test_errors_print_every_number():
    with pytest.raises(ValueError) as e:
        validate(dp=3, pp=3, tp=16, world_size=128, gpus_per_node=8, layers=80, heads=60)
    msg = str(e.value)
    for s in ("dp(3) x pp(3) x tp(16) = 144 != world size (128)", "tp(16) > GPUs per node (8)",
              "layers (80) not divisible by pp(3)", "26.67", "heads (60) not divisible by tp(16)", "3.75"):
        assert s in msg, (s, msg)
    assert problems(2, 2, 8, 32, 8, 80, 64, 8192) == []
    assert "whole number" in problems(0, 1, 1)[0]
    with pytest.raises(ValueError, match="tp\\(3\\)"):
        Layout(dp=1, pp=1, tp=3, gpus_per_node=8)
    with pytest.raises(ValueError, match="order"):
        Layout(order="tp-dp")
    with pytest.raises(ValueError, match="outside 0..31"):
        Layout(2, 2, 8).coords(32)


def test_traffic_counts_four_all_reduces_and_ranks():
    lay = Layout(dp=1, pp=1, tp=4, gpus_per_node=8)
    t = step_traffic(lay, n_params=1e6, layers=2, hidden=8, seq=4, micro_batch=1, bytes_per_value=4)
    act = 4 * 8 * 4
    assert t.tp == pytest.approx(2 * 4 * 2 * 3 / 4 * act)      # 2 layers x 4 all-reduces x ring
    assert t.calls["tp"] == 8 and t.pp == 0 and t.dp == 0
    # 70B on 4 nodes of 8, tp 8 pp 4: TP > DP > PP (the notes' TP > PP > DP only partly holds)
    big = step_traffic(Layout(dp=4, pp=4, tp=8), n_params=70e9, layers=80, hidden=8192, seq=4096,
                       micro_batches=16)
    assert [d for d, _ in big.ranked()] == ["tp", "dp", "pp"]
    z3 = step_traffic(Layout(dp=4), n_params=1e9, layers=16, hidden=2048, seq=2048, zero_stage=3)
    z0 = step_traffic(Layout(dp=4), n_params=1e9, layers=16, hidden=2048, seq=2048)
    assert z3.dp / z0.dp == pytest.approx(1.5)
    # TP across a slow link: same bytes, time grows by the bandwidth ratio (300 / 25 = 12x)
    lay = Layout(dp=2, pp=1, tp=8, gpus_per_node=8)
    tr = step_traffic(lay, n_params=7e9, layers=32, hidden=4096, seq=4096)
    fast = link_times(tr, lay, intra_gbps=300, inter_gbps=25)
    slow = link_times(tr, lay, intra_gbps=300, inter_gbps=25, slow=("tp", "dp"))
    assert fast["tp"] == pytest.approx(tr.tp / 300e9) and fast["dp"] == pytest.approx(tr.dp / 25e9)
    assert slow["tp"] / fast["tp"] == pytest.approx(12)
