"""Context (CP) and expert (EP) parallelism in the grid, checked against Megatron-core's own
rank arithmetic (`megatron/core/parallel_state.py`: `generate_masked_orthogonal_rank_groups`,
`RankGenerator`, and `initialize_model_parallel`'s second, expert generator), re-typed here."""
import pytest

from labkit.nd.layout import Coord, Layout, problems


def _prefix(a):
    out, p = [1], 1
    for v in a:
        p *= v
        out.append(p)
    return out


def _decompose(i, shape):
    return [i // d % s for s, d in zip(shape, _prefix(shape))]


def _megatron_groups(sizes: dict, order: str, dim: str) -> list:
    """Megatron-core's generate_masked_orthogonal_rank_groups for one token of `order`."""
    names = order.split("-")
    shape = [sizes[n] for n in names]
    stride = _prefix(shape)
    mask = [n == dim for n in names]
    m_shape = [s for s, k in zip(shape, mask) if k]
    u_shape = [s for s, k in zip(shape, mask) if not k]
    m_stride = [d for d, k in zip(stride, mask) if k]
    u_stride = [d for d, k in zip(stride, mask) if not k]
    size = _prefix(m_shape)[-1]
    out = []
    for g in range(_prefix(shape)[-1] // size):
        gi = _decompose(g, u_shape)
        out.append([sum(a * b for a, b in zip(_decompose(r, m_shape), m_stride)) +
                    sum(a * b for a, b in zip(gi, u_stride)) for r in range(size)])
    return out


def _norm(groups):
    return sorted(sorted(g) for g in groups)


@pytest.mark.parametrize("tp,cp,dp,pp,ep", [(2, 2, 2, 2, 2), (2, 2, 2, 2, 4), (1, 4, 2, 2, 8),
                                            (4, 2, 4, 1, 2), (2, 1, 8, 2, 4), (8, 2, 2, 2, 4)])
def test_groups_match_megatron_core(tp, cp, dp, pp, ep):
    lay = Layout(dp=dp, pp=pp, tp=tp, cp=cp, ep=ep, order="megatron")
    dense = dict(tp=tp, cp=cp, ep=1, dp=dp, pp=pp)
    for d in ("tp", "cp", "dp", "pp"):
        assert _norm(lay.groups(d)) == _norm(_megatron_groups(dense, "tp-cp-ep-dp-pp", d)), d
    expert = dict(tp=tp, cp=1, ep=ep, dp=lay.edp, pp=pp)       # expert TP = TP, cp folded away
    assert _norm(lay.groups("ep")) == _norm(_megatron_groups(expert, "tp-cp-ep-dp-pp", "ep"))
    assert _norm(lay.groups("edp")) == _norm(_megatron_groups(expert, "tp-cp-ep-dp-pp", "dp"))
    assert lay.world_size == tp * cp * dp * pp and lay.edp * ep == cp * dp


def test_cp_sits_after_tp_and_coords_round_trip():
    lay = Layout(dp=2, pp=2, tp=2, cp=2, order="megatron")
    assert lay.order == "tp-cp-dp-pp"
    assert lay.coords(2) == Coord(dp=0, pp=0, tp=0, cp=1)
    assert lay.group_of(0, "cp") == [0, 2] and lay.group_of(0, "dp") == [0, 4]
    notes = Layout(dp=2, pp=2, tp=2, cp=2)
    assert notes.order == "tp-cp-pp-dp" and notes.group_of(0, "pp") == [0, 4]
    for r in range(16):
        assert lay.rank_of(*lay.coords(r)) == r and notes.rank_of(*notes.coords(r)) == r
    assert Layout(dp=2, cp=2, order="cp-tp-pp-dp").coords(1) == Coord(0, 0, 0, 1)
    # cp = 1 keeps the 3D layout exactly as before
    assert Layout(dp=2, pp=2, tp=8, order="tp-cp-ep-dp-pp").order == "tp-dp-pp"
    assert len(Layout(2, 2, 8).table()[0]) == 5 and len(Layout(2, 2, 2, cp=2, ep=4).table()[0]) == 7


def test_llama3_long_context_layout():
    # Llama 3 405B at 128K context: TP 8 x CP 16 x PP 16 x DP 8 = 16,384 GPUs (arXiv 2407.21783,
    # table 4); its order [TP, CP, PP, DP] (section 3.3.2) is the notes' DP-outermost order.
    lay = Layout(dp=8, pp=16, tp=8, cp=16, gpus_per_node=8, order="tp-cp-pp-dp")
    assert lay.world_size == 16384 and lay.nodes == 2048
    assert not lay.spans_nodes("tp") and lay.spans_nodes("cp")     # 8 x 16 ranks: 16 nodes
    assert lay.group_of(0, "cp") == list(range(0, 128, 8))
    assert problems(8, 16, 8, 16384, 8, None, 128, 16384, cp=16, seq=131072) == []
    # 126 layers on 16 stages is uneven: Llama 3 drops one layer from the first and the last
    # stage (section 3.3.2, 2 x 7 + 14 x 8 = 126); labkit's stages are equal, and says so
    assert problems(8, 16, 8, layers=126) == [
        "layers (126) not divisible by pp(16): 126 / 16 = 7.88 layers per stage; "
        "pick pp among the divisors of 126"]


def test_errors_name_cp_and_ep_numbers():
    msg = "\n".join(problems(3, 2, 8, 100, 8, cp=4, ep=5, seq=1004, experts=8))
    for s in ("dp(3) x pp(2) x tp(8) x cp(4) = 192 != world size (100)",
              "sequence (1004) not divisible by 2 x cp(4) = 8",
              "ep(5) does not divide cp(4) x dp(3) = 12", "experts (8) not divisible by ep(5)", "1.60"):
        assert s in msg, (s, msg)
    with pytest.raises(ValueError, match=r"ep\(3\) does not divide"):
        Layout(dp=4, ep=3)
    with pytest.raises(ValueError, match="order"):
        Layout(cp=2, order="tp-cp-cp-dp")
    with pytest.raises(ValueError, match="dim must be one of"):
        Layout(dp=2).groups("xp")


@pytest.mark.parametrize("order", ["megatron", "notes"])
def test_fast_node_crossing_equals_listing_the_groups(order):
    import itertools
    for tp, cp, dp, pp, ep, g in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 3), (1, 3), (1, 2, 4), (4, 8)):
        if (cp * dp) % ep or g % tp:
            continue
        lay = Layout(dp=dp, pp=pp, tp=tp, cp=cp, ep=ep, gpus_per_node=g, order=order)
        for d in ("tp", "cp", "pp", "dp", "ep", "edp"):
            brute = any(len({r // g for r in grp}) > 1 for grp in lay.groups(d))
            assert lay.spans_nodes(d) == brute, (lay, d)
