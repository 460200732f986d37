"""fp16 and loss scaling (module 09): gradients that underflow to 0 without scaling, labkit's
LossScaler step for step with torch.amp.GradScaler, and on 2 ranks with sharded gradients the
found-inf flag agreed (every rank skips the step one rank overflows), as ShardedGradScaler does."""
import pytest
import torch

from labkit.tricks import fp16
from labkit.tricks.loss_scale import LossScaler, ranges, underflowed


# -- one process -----------------------------------------------------------------------------
def test_ranges_and_underflow_count():
    h, b = ranges(torch.float16), ranges(torch.bfloat16)
    assert (h["max"], h["smallest_normal"], h["smallest_subnormal"]) == (65504.0, 2.0 ** -14, 2.0 ** -24)
    assert b["smallest_normal"] == torch.finfo(torch.float32).smallest_normal and b["eps"] == 2.0 ** -7
    g = torch.tensor([1e-3, 1e-7, 2.0 ** -26, 0.0, -1e-9])
    assert underflowed(g) == 2 and underflowed(g, torch.bfloat16) == 0


def test_fp16_underflow_boundary_is_round_to_nearest_even_not_a_flush_below_2_pow_minus_24():
    """What notebook 09 and loss_scale.py say: |g| <= 2^-25 becomes 0 in fp16; a value in
    (2^-25, 2^-24) rounds up to 2^-24, the smallest subnormal; 2^-25 itself is a tie, and ties go
    to the even neighbour, 0. 1.5 x 2^-24 is a tie between 2^-24 and 2^-23: it goes to 2^-23."""
    tiny, half = 2.0 ** -24, 2.0 ** -25
    above_half = torch.nextafter(torch.tensor(half), torch.tensor(1.0)).item()
    x = torch.tensor([half, above_half, 0.75 * tiny, 0.9999 * tiny, tiny, 1.5 * tiny, -half, -0.6 * tiny,
                      half / 2], dtype=torch.float32)
    want = [0.0, tiny, tiny, tiny, tiny, 2 * tiny, -0.0, -tiny, 0.0]
    assert x.to(torch.float16).float().tolist() == want
    assert underflowed(x) == 3                                 # 2^-25, -2^-25 and 2^-26 only
    assert underflowed(torch.tensor([above_half, 0.6 * tiny])) == 0      # below 2^-24, still kept
    assert underflowed(x, torch.bfloat16) == 0                 # bf16 has fp32's exponent range


def test_fp16_unscaled_underflows_every_gradient_and_the_loss_stalls():
    ref = fp16.underflow(None, steps=6, fp16=False)
    bare = fp16.underflow(None, steps=6)
    static = fp16.underflow(LossScaler(2.0 ** 16, dynamic=False), steps=6)
    assert ref["smallest"] < 2.0 ** -25                       # the fp32 gradients fp16 cannot hold
    assert bare["underflowed"] == [bare["n"]] * 6 and len(set(bare["loss"])) == 1
    assert max(static["underflowed"]) <= 0.01 * static["n"] and not any(static["skipped"])
    assert ref["loss"][-1] < 0.5 * ref["loss"][0]
    assert abs(static["loss"][-1] - ref["loss"][-1]) < 0.05 * ref["loss"][-1]


def test_dynamic_scaler_halves_and_skips_on_overflow_then_grows():
    r = fp16.underflow(LossScaler(2.0 ** 36, growth_interval=3), steps=10)
    s, skip = r["scale"], r["skipped"]
    assert skip[0] and s[1] == s[0] / 2                        # 2^36: the output's gradient overflows
    for i in range(1, len(s)):
        assert s[i] in (s[i - 1] / 2, s[i - 1], s[i - 1] * 2)
        assert (s[i] == s[i - 1] / 2) == skip[i - 1]
    assert any(s[i] == 2 * s[i - 1] for i in range(1, len(s)))          # grew after 3 good steps
    assert r["underflowed"][-1] <= 0.01 * r["n"]


def test_labkit_scaler_matches_gradscaler_step_for_step():
    r = fp16.beside_gradscaler(steps=12)
    assert r["labkit"] == r["torch"]
    assert any(r["labkit"]["skipped"]) and not all(r["labkit"]["skipped"])
    assert r["max_weight_diff"] == 0.0 and r["finite"]


def test_unscaling_fp16_gradients_in_place_is_refused():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    p.grad = torch.ones(3, dtype=torch.float16)
    with pytest.raises(ValueError, match="fp32 masters"):
        LossScaler().unscale_(torch.optim.SGD([p], lr=1.0))


def test_update_before_step_says_so():
    with pytest.raises(RuntimeError, match="before step"):
        LossScaler().update()


# -- 2 ranks ---------------------------------------------------------------------------------
def _by_step(res):
    return list(zip(*[r["rows"] for r in res]))


def test_ranks_agree_to_skip_like_sharded_grad_scaler(cluster2):
    ours = cluster2.run(fp16.agree_on_skip, "labkit", 8)
    torch_ = cluster2.run(fp16.agree_on_skip, "sharded", 8)
    for a, b in zip(ours, torch_):
        assert [(x["scale"], x["stepped"], x["inf_shard"]) for x in a["rows"]] == \
               [(x["scale"], x["stepped"], x["inf_shard"]) for x in b["rows"]]
    lone = [s for s in _by_step(ours) if s[0]["inf_shard"] != s[1]["inf_shard"]]
    assert lone, "no step where only one rank found an inf in its shard"
    for step in _by_step(ours):
        assert step[0]["stepped"] == step[1]["stepped"] and step[0]["scale"] == step[1]["scale"]
    assert all(not r["stepped"] for r in lone[0])


def test_ranks_deciding_alone_drift_apart(cluster2):
    alone = _by_step(cluster2.run(fp16.agree_on_skip, "labkit-alone", 8))
    assert any(a["stepped"] != b["stepped"] for a, b in alone)
    assert any(a["scale"] != b["scale"] for a, b in alone)        # and their scales part


def test_fp16_in_the_tricks_table_holds_what_bf16_holds():
    from labkit.tricks import Config, Shape, predict
    shape = Shape(n_layer=2, n_embd=64, n_head=4, vocab_size=256, seq=64, batch=4)
    a, b = predict(Config(precision="fp16"), 1000, shape), predict(Config(precision="mixed"), 1000, shape)
    assert (a.params, a.grads, a.master, a.momentum, a.variance) == (2000, 2000, 4000, 4000, 4000)
    assert a.activations == b.activations < predict(Config(), 1000, shape).activations
    assert Config(precision="fp16").code == "H" and "fp16" in Config(precision="fp16").describe()
    with pytest.raises(ValueError, match="fp16"):
        Config(precision="fp16", zero=1)
