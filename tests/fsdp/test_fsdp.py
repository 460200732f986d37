"""labkit.fsdp: FSDP2 applied from outside, against one process and against the byte formulas."""
import pytest

from labkit.fsdp import strategies as S

PSI = 1_000_000                   # bytes of one group, for the formula tests


def test_nccl_bytes_per_step_are_the_zero_papers():
    g = [S.Group(PSI, PSI, True)]
    n = 1024
    f = (n - 1) / n
    assert S.bytes_per_step(g, "full", n)["total"] == pytest.approx(3 * f * PSI)      # ZeRO-3: 3 Psi
    assert S.bytes_per_step(g, "grad_op", n)["total"] == pytest.approx(2 * f * PSI)   # ZeRO-2: 2 Psi
    assert S.bytes_per_step(g, "no_shard", n)["total"] == pytest.approx(2 * f * PSI)  # DDP: 2 Psi
    # the root stays unsharded after forward: one all-gather fewer
    assert S.bytes_per_step([S.Group(PSI, PSI, False)], "full", n)["total"] == pytest.approx(2 * f * PSI)


def test_gloo_reduce_scatter_costs_an_all_reduce():
    assert S.collective_bytes("reduce_scatter", PSI, 4, "gloo") == pytest.approx(1.5 * PSI)
    assert S.collective_bytes("reduce_scatter", PSI, 4, "nccl") == pytest.approx(0.75 * PSI)
    assert S.collective_bytes("all_gather", PSI, 4, "gloo") == pytest.approx(0.75 * PSI)


def test_hybrid_shards_inside_a_group_and_all_reduces_the_shard_across():
    out = S.bytes_per_step([S.Group(PSI, PSI, True)], "hybrid", 8, replicas=2)
    assert out["all_gather"] == pytest.approx(2 * 3 / 4 * PSI)       # inside 4 ranks
    assert out["reduce_scatter"] == pytest.approx(3 / 4 * PSI)
    assert out["all_reduce"] == pytest.approx(2 * 1 / 2 * PSI / 4)    # the Psi/4 shard over 2 replicas


def test_frozen_parameters_are_gathered_never_reduced():
    out = S.bytes_per_step([S.Group(PSI, 0, True)], "full", 4)
    assert out["reduce_scatter"] == 0 and out["all_gather"] > 0
    assert S.calls_per_step([S.Group(PSI, 0, True)], "full") == {"all_gather": 2, "reduce_scatter": 0, "all_reduce": 0}


def test_padding_rounds_dim0_up_to_the_shard_count():
    assert S.padded_numel((37, 13), 4) == 40 * 13
    assert S.padded_numel((13,), 2) == 14
    assert S.padded_numel((), 4) == 4


@pytest.mark.parametrize("bad", [dict(strategy="FULL"), dict(n=0), dict(backend="mpi")])
def test_bad_arguments_say_what_is_allowed(bad):
    with pytest.raises(ValueError, match="must be"):
        if "strategy" in bad:
            S.bytes_per_step([], bad["strategy"], 4)
        else:
            S.collective_bytes("all_gather", PSI, bad.get("n", 4), bad.get("backend", "nccl"))


def test_the_notes_fsdp1_names_map_to_fsdp2_and_zero():
    assert {s.fsdp1: s.zero_stage for s in S.STRATEGIES.values()} == {
        "FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3}


def _check(r, n):
    what = f"{r['strategy']} wrap={r['wrap']} ring={r['ring']} rank {r['rank']} of {n}"
    # same as one process: every element within its derived bound (labkit.numerics: the
    # gradient's reordered sum over the batch, through one Adam step), on every CPU kernel set
    assert r["err_over_bound"] <= 1, (what, r["max_err"], r["err_over_bound"])
    assert r["calls"] == {k: r["predicted_calls"][k] for k in r["calls"]}, what                                  # every collective foreseen
    # Beyond the payload, gloo frames each message (96 B per send, 48 B per posted receive:
    # labkit.comm.traffic). A ring collective makes at most 2(N-1) steps; gloo's chunked ring
    # sends up to two messages a step and labkit's ring (ring=True) pipelines 4 pieces per chunk,
    # so each call adds at most 4(N-1) x 144 B of headers (x4 with the ring).
    calls = sum(r["predicted_calls"].values())
    headers = calls * 4 * (n - 1) * 144 * (4 if r["ring"] else 1)
    assert r["predicted_sent"] <= r["sent"] <= r["predicted_sent"] + headers, (what, r["sent"] - r["predicted_sent"], headers)
    m, f = r["measured"], r["formula_padded"]
    assert m.params == f.params, what                                  # to the byte, padding counted
    assert m.grads == r["grads_expected"], what                        # trainable ones only
    # Adam's moments are shaped like the unpadded local shard: at most the padding less
    assert 0 <= r["grads_expected"] - m.momentum <= 4 * r["padding_elements"], what


@pytest.mark.parametrize("strategy", ["full", "grad_op", "no_shard"])
def test_fsdp2_equals_one_process_and_its_bytes_are_predicted(cluster, strategy):
    from labkit.fsdp import runs
    for r in cluster.run(runs.step_report, wrap="block", strategy=strategy, timeout=120):
        _check(r, cluster.world_size)


def test_hybrid_on_a_2x2_mesh_holds_half_the_model_per_rank(cluster4):
    from labkit.fsdp import runs
    for r in cluster4.run(runs.step_report, wrap="block", strategy="hybrid", replicas=2, timeout=120):
        _check(r, 4)
        assert r["measured"].params == r["formula_padded"].params       # Psi/2 (+ padding) per rank


def test_ring_reduce_scatter_sends_what_nccl_would(cluster4):
    from labkit.fsdp import runs
    gloo, ring = (cluster4.run(runs.step_report, wrap="block", strategy="full", ring=x, timeout=120)[0]
                  for x in (False, True))
    _check(ring, 4)
    assert ring["sent"] < gloo["sent"]


def test_awkward_model_tied_and_frozen_per_linear(cluster):
    from labkit.fsdp import runs
    for r in cluster.run(runs.step_report, wrap="linear", strategy="full", model="awkward", timeout=120):
        _check(r, cluster.world_size)




def test_coarse_wrapping_gathers_more_at_once(cluster2):
    """The notes' trade-off: one unit gathers the whole model (the highest peak of gathered
    parameters), one per block less, one per linear least, at the price of more calls."""
    from labkit.fsdp import runs
    rep = {w: cluster2.run(runs.peak_report, wrap=w, timeout=120)[0] for w in ("model", "block", "linear")}
    gathered = {w: r["peak"]["params (gathered)"] for w, r in rep.items()}
    assert gathered["model"] > gathered["block"] > gathered["linear"], gathered
    calls = {w: r["calls"]["all_gather"] for w, r in rep.items()}
    assert calls["model"] < calls["block"] < calls["linear"], calls


def test_use_orig_params_false_loses_the_no_decay_group(cluster2):
    from labkit.fsdp import pitfalls
    flat, orig, v2 = (cluster2.run(pitfalls.param_groups, **kw, timeout=120)[0] for kw in
                      (dict(use_orig_params=False), dict(use_orig_params=True), dict(use_orig_params=True, fsdp2=True)))
    assert flat["tensors_per_group"] == [1, 0]                # one FlatParameter, decayed
    assert flat["tensors_expected"][1] > 0
    assert orig["tensors_per_group"] == orig["tensors_expected"]
    assert v2["tensors_per_group"] == v2["tensors_expected"]


def test_a_local_shard_norm_is_wrong_and_the_global_one_is_right(cluster):
    from labkit.fsdp import pitfalls
    for r in cluster.run(pitfalls.clip_norms, timeout=120):
        assert abs(r["global_norm"] - r["one_process_norm"]) < 1e-4 * r["one_process_norm"], r
        assert r["local_shard_norm"] < 0.9 * r["one_process_norm"], r


def test_clip_norms_with_a_frozen_parameter_matches_one_process(cluster2):
    """A frozen parameter has no gradient on any rank: the norms skip it, as one process does."""
    from labkit.fsdp import pitfalls
    frozen = ("pos.weight", "blocks.0.fc.weight")
    for r in cluster2.run(pitfalls.clip_norms, frozen=frozen, timeout=120):
        assert r["with_grad"] == 28 - len(frozen), r           # TinyGPT's 28 tensors less the frozen
        assert abs(r["global_norm"] - r["one_process_norm"]) < 1e-4 * r["one_process_norm"], r
        assert r["local_shard_norm"] < 0.9 * r["one_process_norm"], r
    everything = cluster2.run(pitfalls.clip_norms, timeout=120)[0]
    assert everything["one_process_norm"] > r["one_process_norm"] * (1 + 1e-3), (everything, r)


def test_a_sharded_checkpoint_resumes_on_the_same_and_another_world_size(cluster4, cluster2, tmp_path):
    from labkit.fsdp import checkpoint as ck
    path = str(tmp_path / "ck")
    saved = cluster4.run(ck.train_and_save, path, timeout=120)[0]
    assert saved["shard_files"] == 4                                   # one file of shards per rank
    for c in (cluster4, cluster2):
        got = c.run(ck.resume_and_step, path, timeout=120)[0]["after_next_step"]
        err = max((saved["after_next_step"][k] - v).abs().max().item() for k, v in got.items())
        assert err < 1e-6, (c.world_size, err)
    shapes = cluster2.run(ck.full_state_shapes, timeout=120)[0]
    assert shapes["head.weight"] == (67, 64)
