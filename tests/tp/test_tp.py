"""Tensor parallelism on real gloo ranks against the same blocks on one device."""
import pytest

from labkit.tp.layers import shard_rows
from labkit.tp.parity import SCALE, batch, block_parity, block_traffic, reference_blocks, \
    saved_activation_bytes, tolerance

pytestmark = pytest.mark.cluster   # starts ranks or a subprocess

TOL = tolerance()                  # derived: labkit.tp.parity.tolerance (6e-3; observed < 1e-6)


def test_the_tolerances_scale_holds_on_one_process():
    ref = reference_blocks()
    x, w = batch()
    x.requires_grad_()
    y = ref(x)
    (y * w).sum().backward()
    values = [y, x.grad] + [p.grad for p in ref.parameters()]
    assert max(v.abs().max().item() for v in values) <= SCALE


@pytest.mark.parametrize("sp", [False, True], ids=["tp", "tp+sp"])
def test_blocks_match_one_device(cluster, sp):
    res = cluster.run(block_parity, sequence_parallel=sp)
    for rank, diffs in enumerate(res):
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] < TOL, (rank, worst, diffs[worst])
    assert {"0.attn.qkv.weight", "0.attn.proj.weight", "1.mlp.fc_out.bias", "input grad"} <= set(res[0])


def test_uneven_sizes_give_clear_errors():
    with pytest.raises(ValueError, match=r"MLP hidden size \(fc\) \(10\) does not divide by the "
                                         r"tensor-parallel degree \(4\): 10 / 4 = 2.50"):
        shard_rows(10, 4, 0, "MLP hidden size (fc)")
    assert shard_rows(12, 4, 2, "x") == slice(6, 9)


def _uneven_heads():
    try:
        block_parity(n_embd=48, n_head=6)
    except ValueError as exc:
        return str(exc)
    return "no error"


def test_heads_not_divisible_on_ranks(cluster4):
    msg = cluster4.run(_uneven_heads)[0]
    assert "number of attention heads (6) does not divide by the tensor-parallel degree (4)" in msg


def test_four_all_reduces_per_layer(cluster):
    for rank, r in enumerate(cluster.run(block_traffic, n_layer=2)):
        assert r["calls each way"] == 4
        for way in ("forward", "backward"):     # bytes within 1 % of 2 (t-1)/t x activation, x2 layers
            assert abs(r[way] / r["formula each way"] - 1) < 0.01, (rank, way, r)


def test_sequence_parallel_bytes_on_the_wire(cluster):
    t = cluster.world_size
    tp = cluster.run(block_traffic)[0]
    sp = cluster.run(block_traffic, sequence_parallel=True)[0]
    sp_gloo = cluster.run(block_traffic, sequence_parallel=True, impl="torch")[0]
    assert abs(sp["forward"] / tp["forward"] - 1) < 0.01      # ring reduce-scatter + all-gather
    # backward: the same pairs, plus the input of qkv and fc all-gathered again (s/t kept)
    assert sp["extra backward"] == 2 * (t - 1) / t * sp["activation bytes"]
    assert abs(sp["backward"] / (sp["formula each way"] + sp["extra backward"]) - 1) < 0.01, sp
    assert abs(sp_gloo["forward"] / tp["forward"] - 1.5) < 0.03, sp_gloo   # gloo: RS sends an AR


@pytest.mark.parametrize("attention", ["sdpa", "math"])
def test_activation_memory_matches_korthikanti(cluster, attention):
    """Bytes saved for backward within 2 % of Korthikanti et al.'s formula, TP and TP+SP
    (sdpa keeps no attention scores: their selective case; math keeps them)."""
    from labkit.tp.parity import activation_formula
    t = cluster.world_size
    for sp in (False, True):
        want = activation_formula(sequence_parallel=sp, attention=attention, t=t)
        for rank, got in enumerate(cluster.run(saved_activation_bytes, sequence_parallel=sp,
                                               attention=attention)):
            assert abs(got / want - 1) < 0.02, (t, sp, rank, got, want)


def test_dtensor_same_results(cluster4):
    """PyTorch's parallelize_module (4 ranks only: importing DTensor costs seconds per rank)."""
    from labkit.tp.dtensor_tp import dtensor_parity
    for sp in (False, True):
        for rank, diffs in enumerate(cluster4.run(dtensor_parity, sequence_parallel=sp)):
            worst = max(diffs, key=diffs.get)
            assert diffs[worst] < TOL, (sp, rank, worst, diffs[worst])
    from labkit.tp.dtensor_tp import dtensor_sp_traffic
    dt = cluster4.run(dtensor_sp_traffic)[0]
    act = dt["activation bytes"]      # gloo: 4 pairs x (1.5 + 0.75); 4 all-reduces x 1.5
    assert abs(dt["DTensor TP+SP"] / act - 9) < 0.1 and abs(dt["DTensor TP"] / act - 6) < 0.1, dt


def test_dtensor_plan_four_all_reduces_per_layer(cluster):
    """torchtitan's plan (PrepareModuleInput on attn): 4 all-reduces per layer, as Megatron;
    without it q, k and v each all-reduce their input gradient: 6. Counted by CommDebugMode."""
    from labkit.tp.dtensor_tp import dtensor_comm_counts
    good = cluster.run(dtensor_comm_counts)
    bad = cluster.run(dtensor_comm_counts, prepare_inputs=False)
    sp = cluster.run(dtensor_comm_counts, sequence_parallel=True)
    for rank in range(cluster.world_size):
        assert good[rank]["collectives"] == {"all_reduce": 4.0}, (rank, good[rank])
        assert bad[rank]["collectives"] == {"all_reduce": 6.0}, (rank, bad[rank])
        assert sp[rank]["collectives"] == {"all_gather_into_tensor": 4.0, "reduce_scatter_tensor": 4.0}, sp[rank]
        for res in (good, bad, sp):      # output and input gradient equal one device either way
            assert res[rank]["max diff"] < TOL, (rank, res[rank])


def test_fsdp2_times_tp_equals_one_process(cluster4):
    from labkit.tp.two_d import two_d_parity
    res = cluster4.run(two_d_parity, dp=2, tp=2)
    # two SGD steps at lr 0.1 (two_d_parity's defaults) on gradients within tolerance(b=4):
    # parameters within numerics.sgd_bound (|p| below SCALE)
    from labkit.tp.two_d import tolerance as two_d_tolerance
    bound = two_d_tolerance()
    for r in res:
        assert r["max diff"] < bound, (r, bound)
    assert res[0]["mesh"] == [[0, 1], [2, 3]]
    assert res[0]["local shape"] == (16, 64)        # q: 64 rows / tp 2 / dp 2


def _group_sums():
    import torch
    import torch.distributed as dist

    from labkit.nd.layout import Layout, build_groups
    groups = build_groups(Layout(dp=2, pp=1, tp=2, gpus_per_node=2))
    out = {}
    for d in ("tp", "pp", "dp"):
        t = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(t, group=groups[d])
        out[d] = int(t.item())
    return out


def test_layout_builds_real_groups(cluster4):
    sums = cluster4.run(_group_sums)
    assert [s["tp"] for s in sums] == [1, 1, 5, 5]          # TP groups {0, 1}, {2, 3}
    assert [s["dp"] for s in sums] == [2, 4, 2, 4]          # DP groups {0, 2}, {1, 3}
    assert [s["pp"] for s in sums] == [0, 1, 2, 3]          # PP 1: each rank alone
