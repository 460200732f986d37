"""labkit.pitfalls: each pitfall detector on a failing and a passing case, and the pitfalls on ranks."""
import pytest

from labkit import pitfalls as P


def test_forgotten_set_device_detected_from_devices_and_local_ranks():
    from labkit.pitfalls.ranks import illustrated_device_map
    ok, why = P.devices_distinct(illustrated_device_map(4, set_device=False))
    assert not ok and "ranks 0, 1, 2, 3 all use cuda:0" in why and "set_device" in why
    assert P.devices_distinct(illustrated_device_map(4, set_device=True))[0]
    assert P.devices_distinct({0: "cpu", 1: "cpu"})[0]          # CPU ranks share the CPU by design
    ok, why = P.devices_distinct({0: "cuda:1", 1: "cuda:0"}, local_ranks={0: 0, 1: 1})
    assert not ok and "rank 0 uses cuda:1 but its LOCAL_RANK is 0" in why
    assert P.devices_distinct({0: "cuda:0", 1: "cuda:1"}, local_ranks={0: 0, 1: 1})[0]


def _device_map():
    from labkit.pitfalls.ranks import device_map
    return device_map()


def test_device_map_measured_on_the_ranks(cluster2):
    import torch
    measured = {}
    for part in cluster2.run(_device_map):
        measured.update(part)
    assert sorted(measured) == [0, 1] and all(local == r for r, (_, local) in measured.items())
    devices = {r: d for r, (d, _) in measured.items()}
    ok, why = P.devices_distinct(devices, {r: local for r, (_, local) in measured.items()})
    if not torch.cuda.is_available():
        assert ok and set(devices.values()) == {"cpu"}, (devices, why)
    elif torch.cuda.device_count() >= 2:          # NCCL: labkit's ranks call set_device(local rank)
        assert ok and devices == {0: "cuda:0", 1: "cuda:1"}, (devices, why)
    else:                                         # one GPU for two ranks: they do share it
        assert not ok and "all use cuda:0" in why, (devices, why)


def test_validation_padding_missing_and_shuffling():
    ok, why = P.validation_shards([[0, 2, 4], [1, 3, 0]], 5)    # DistributedSampler padding
    assert not ok and "1 item evaluated twice" in why
    assert "never evaluated" in P.validation_shards([[0, 2], [1]], 4)[1]
    ok, why = P.validation_shards([[0, 2], [1, 3]], 4, again=[[2, 0], [3, 1]])
    assert not ok and "shuffle=False" in why
    assert P.validation_shards([[0, 2], [1, 3]], 4, again=[[0, 2], [1, 3]])[0]


def test_batchnorm_statistics():
    assert not P.batchnorm_in_sync([[0.1, 1.0], [0.3, 1.0]])[0]
    assert P.batchnorm_in_sync([[0.1, 1.0], [0.1, 1.0 + 1e-7]])[0]
    assert "different sizes" in P.batchnorm_in_sync([[0.1, 1.0], [0.1]])[1]


@pytest.mark.parametrize("lr, ok, word", [(0.1, False, "not scaled"), (0.8, True, "linear"),
                                          (0.2828, True, "sqrt"), (3.2, False, "divergence")])
def test_lr_rule(lr, ok, word):
    got, why = P.lr_rule(lr, base_lr=0.1, base_batch=32, global_batch=256)
    assert got is ok and word in why, why


def test_seeds():
    assert P.seeds_ok([1, 1], [0, 0], [5, 6])[0]
    assert "initial weights differ" in P.seeds_ok([1, 2], [0, 0], [5, 6])[1]
    assert "sampler seeds differ" in P.seeds_ok([1, 1], [0, 1], [5, 6])[1]
    ok, why = P.seeds_ok([1, 1], [0, 0], [5, 5])          # identical masks across DP ranks: a note
    assert ok and why.count("note: dropout masks are identical") == 1 and "not a bug" in why
    ok, why = P.seeds_ok([1, 1], [0, 0], [5, 6], tp_replicated_masks=[7, 8])
    assert not ok and "replicated activation differ inside the tensor-parallel group" in why
    assert P.seeds_ok([1, 1], [0, 0], [5, 6], tp_replicated_masks=[7, 7])[0]


def test_pipeline_balance():
    ok, why = P.pipeline_balance([0.01, 0.03, 0.01, 0.01])
    assert not ok and "stage 1" in why
    assert P.pipeline_balance([0.010, 0.011, 0.010, 0.0105])[0]


# --- on ranks -------------------------------------------------------------------------------
def _bn(sync):
    from labkit.pitfalls.ranks import batchnorm_stats
    return batchnorm_stats(sync)


def test_batchnorm_differs_then_hand_synchronised_matches_one_process(cluster):
    plain = cluster.run(_bn, False)
    assert not P.batchnorm_in_sync([r["stats"] for r in plain])[0]
    synced = cluster.run(_bn, True)
    assert P.batchnorm_in_sync([r["stats"] for r in synced])[0]
    assert P.batchnorm_in_sync([synced[0]["stats"], synced[0]["one_process"]])[0]
    assert max(r["out_gap"] for r in synced) < 1e-5 and max(r["grad_gap"] for r in synced) < 1e-5


def _seeds(**kw):
    from labkit.pitfalls.ranks import seed_probe
    return seed_probe(**kw)


def test_seed_probe_on_ranks(cluster2):
    from labkit.ddp.sampler import shard_report

    def judge(res):
        return P.seeds_ok([r["weights"] for r in res], [r["sampler_seed"] for r in res],
                          [r["dropout"] for r in res])
    good = cluster2.run(_seeds)
    assert judge(good)[0] and not shard_report([r["indices"] for r in good], 40)["overlap"]
    assert "initial weights" in judge(cluster2.run(_seeds, weights_seed_by_rank=True))[1]
    bad = cluster2.run(_seeds, sampler_seed_by_rank=True)
    assert "sampler seeds" in judge(bad)[1] and shard_report([r["indices"] for r in bad], 40)["overlap"]
    ok, why = judge(cluster2.run(_seeds, dropout_seed_by_rank=False))
    assert ok and "note: dropout masks are identical" in why
    tp = cluster2.run(_seeds, tp_replicated_seed_by_rank=True)
    ok, why = P.seeds_ok([r["weights"] for r in tp], [r["sampler_seed"] for r in tp], [r["dropout"] for r in tp],
                         tp_replicated_masks=[r["tp_replicated"] for r in tp])
    assert not ok and "tensor-parallel group" in why
    tp = cluster2.run(_seeds)
    assert P.seeds_ok([r["weights"] for r in tp], [r["sampler_seed"] for r in tp], [r["dropout"] for r in tp],
                      tp_replicated_masks=[r["tp_replicated"] for r in tp])[0]


def test_single_rank_sanity_says_no_when_nothing_can_be_learned():
    """Issue 33: the item had no failing case. Shuffled labels still let the loss fall (to the
    targets' frequencies, about log 37): not learning; a frozen model does not move at all."""
    from labkit.pitfalls.checklist import _single_rank_sanity
    ok, why = _single_rank_sanity()
    assert ok and "chance: log 37 = 3.61" in why, why
    ok, why = _single_rank_sanity(shuffled_labels=True)
    assert not ok and "it does not learn alone" in why, why
    ok, why = _single_rank_sanity(frozen=True)
    assert not ok and "it does not learn alone" in why, why


def _norm(**kw):
    from labkit.pitfalls.checklist import _gradient_norm
    return _gradient_norm(16, 100.0, **kw)


def test_gradient_norm_is_one_process_norm_and_a_blow_up_is_caught(cluster2):
    ok, why = cluster2.run(_norm)[0]
    assert ok and "one process's on the global batch" in why, why
    ok, why = cluster2.run(_norm, summed=True)[0]                   # the sum over 2 ranks, not the mean
    assert not ok and "(2x): the all-reduced gradient is not the global batch's mean" in why, why
    ok, why = cluster2.run(_norm, lr=10.0, steps=5)[0]              # SGD at lr 10: the norm explodes
    assert not ok and "above 100 or not finite" in why, why


def _checklist(**kw):
    from labkit.pitfalls.checklist import convergence_checklist
    return convergence_checklist(**kw)


def test_convergence_checklist_passes_and_fails(cluster2):
    good = cluster2.run(_checklist, lr=0.8, base_lr=0.1, base_batch=4, batch=16)   # linear: 4 -> 32
    assert good[0] == good[1] and all(ok for _, ok, _ in good[0]), good[0]
    bad = cluster2.run(_checklist, lr=0.1, base_lr=0.1, base_batch=4, batch=16,
                       weights_seed_by_rank=True)
    verdict = {item: (ok, why) for item, ok, why in bad[0]}
    assert not verdict["learning-rate rule"][0] and "not scaled" in verdict["learning-rate rule"][1]
    assert not verdict["seeds in sync"][0] and "initial weights" in verdict["seeds in sync"][1]
    assert verdict["single-rank sanity"][0] and verdict["gradient norm"][0]
    exploding = cluster2.run(_checklist, lr=0.8, base_lr=0.1, base_batch=4, batch=16, max_norm=1e-6)
    assert not dict((i, ok) for i, ok, _ in exploding[0])["gradient norm"]
