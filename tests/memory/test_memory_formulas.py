"""labkit.memory formulas against hand-computed values: the notes, the ZeRO paper, Korthikanti."""
import math

import pytest

import labkit.memory as M

G = 1e9
GiB = 2 ** 30


def test_notes_70b_fp16_weights_are_140_gb():
    assert M.weights_bytes(70e9, "fp16") == 140 * G          # 70e9 x 2 B
    assert M.weights_bytes(70e9, "fp32") == 280 * G


def test_notes_7b_mixed_adam_table_is_112_gb():
    b = M.model_states(7e9)
    # 7B x 2 B, 7B x 2 B, then fp32 master, m, v: 7B x 4 B each
    assert (b.params, b.grads, b.master, b.momentum, b.variance) == (14 * G, 14 * G, 28 * G, 28 * G, 28 * G)
    assert b.total == b.model_state == 112 * G
    assert b.optimizer == 84 * G
    assert M.optimizer_share() == 0.75 and b.optimizer / b.total == 0.75
    assert M.fits(b, 0, gpu_gb=80).margin == -32 * G      # "单卡 80 GB 根本装不下"
    assert not M.fits(b, 0, gpu_gb=80).fits


def test_zero_paper_example_7_5b_on_64_gpus():
    got = M.zero_paper_example()
    # exact: 16 Psi, 4 Psi + 12 Psi/64, 2 Psi + 14 Psi/64, 16 Psi/64 with Psi = 7.5e9
    assert got == {0: 120.0, 1: 31.40625, 2: 16.640625, 3: 1.875}
    assert {s: round(v, 1) for s, v in got.items()} == M.ZERO_PAPER_EXAMPLE["gb"]


@pytest.mark.parametrize("n", [1, 2, 3, 8, 1024])
def test_zero_stage_formulas_per_rank(n):
    psi = 1e9
    want = {0: 16 * psi, 1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n, 3: 16 * psi / n}
    for stage, t in M.zero_table(psi, n).items():
        assert t == pytest.approx(want[stage], rel=1e-15)


def test_zero_savings_about_4x_and_8x_and_where_they_hold():
    assert M.zero_savings_limit(1) == 4.0 and M.zero_savings_limit(2) == 8.0
    assert M.zero_savings_limit(3) == math.inf
    # 90 % of the limit: 16 / (4 + 12/N) >= 3.6  <=>  N >= 27;  16 / (2 + 14/N) >= 7.2 <=> N >= 63
    assert M.world_size_for_savings(1, 3.6) == 27
    assert M.world_size_for_savings(2, 7.2) == 63
    assert M.zero_savings(1, 64) == pytest.approx(16 / 4.1875)
    assert M.zero_savings(3, 64) == pytest.approx(64)           # ZeRO-3: linear in N
    assert M.zero_savings(0, 64) == 1
    with pytest.raises(ValueError, match="tends to 4x"):
        M.world_size_for_savings(1, 4.0)


@pytest.mark.parametrize("precision, optimizer, per_param", [
    ("fp32", "adam", dict(params=4, grads=4, momentum=4, variance=4)),        # 16 B
    ("fp32", "sgd", dict(params=4, grads=4)),                                # 8 B
    ("fp32", "momentum", dict(params=4, grads=4, momentum=4)),               # 12 B
    ("bf16", "adamw", dict(params=2, grads=2, momentum=2, variance=2)),      # 8 B
    ("fp16", "adam", dict(params=2, grads=2, momentum=2, variance=2)),
    ("mixed", "sgd", dict(params=2, grads=2, master=4)),                     # 8 B
    ("mixed", "momentum", dict(params=2, grads=2, master=4, momentum=4)),    # 12 B
    ("mixed", "adam8bit", dict(params=2, grads=2, master=4, momentum=1, variance=1)),  # 10 B
    ("fp32", "adam8bit", dict(params=4, grads=4, momentum=1, variance=1)),   # 10 B
])
def test_bytes_per_param_by_precision_and_optimizer(precision, optimizer, per_param):
    b = M.model_states(1000, precision=precision.upper(), optimizer=optimizer)
    assert b.nonzero() == {k: 1000 * v for k, v in per_param.items()}


def test_8bit_adam_cuts_the_moments_4x():
    full, q = M.model_states(1e9, precision="fp32"), M.model_states(1e9, precision="fp32", optimizer="adam8bit")
    assert (full.momentum + full.variance) / (q.momentum + q.variance) == 4


def test_offload_moves_gradients_and_optimizer_state_to_host():
    b = M.model_states(7e9, zero_stage=1, world_size=8, offload=True)
    assert set(b.on_host) == {"grads", "master", "momentum", "variance"}      # ZeRO-Offload
    assert b.host == 14 * G + 3 * 28 * G / 8
    assert b.device == 14 * G and b.total == 28 * G + 10.5 * G                # only fp16 params
    assert M.fits(b, 0, gpu_gb=40).needed == 14 * G
    z2 = M.model_states(7.5e9, zero_stage=2, world_size=64, offload=True)
    assert z2.device == M.deepspeed_estimate(7.5e9, 2, 64, offload=True) == 2 * 7.5e9


def test_deepspeed_estimator_by_release():
    psi, n = 7.5e9, 64
    # DeepSpeed >= 0.14.3 (PR #5099): 2 Psi + 18 Psi / N; before: 4 Psi + 16 Psi / N
    assert M.deepspeed_estimate(psi, 2, n) == 2 * psi + 18 * psi / n == 17.109375 * G
    assert M.deepspeed_estimate(psi, 2, n, version="0.14.3") == M.deepspeed_estimate(psi, 2, n)
    assert M.deepspeed_estimate(psi, 2, n, version="0.16.4") == M.deepspeed_estimate(psi, 2, n)
    assert M.deepspeed_estimate(psi, 2, n, version="0.14.2") == 4 * psi + 16 * psi / n == 31.875 * G
    assert M.deepspeed_estimate(psi, 2, n, version="v0.9.5") == 31.875 * G
    # DeepSpeed's docs example: t5-3b, 2851e6 params on 8 GPUs, 15.93 GiB (old) per GPU
    assert round(M.deepspeed_estimate(2851e6, 2, 8, version="0.14.0") / GiB, 2) == 15.93
    assert round(M.deepspeed_estimate(2851e6, 2, 8) / GiB, 2) == 11.28
    # the current form is the paper's 2 Psi + 14 Psi / N plus an fp32 gradient shard, 4 Psi / N
    paper = M.model_states(psi, zero_stage=2, world_size=n).total
    assert paper == 2 * psi + 14 * psi / n
    assert M.deepspeed_estimate(psi, 2, n) - paper == 4 * psi / n
    assert M.deepspeed_estimate(psi, 2, n, offload=True) == 2 * psi
    assert M.deepspeed_estimate(psi, 3, n, largest_layer_params=1e8) == 4e8 + 18 * psi / n
    with pytest.raises(ValueError, match="2 and 3"):
        M.deepspeed_estimate(psi, 1, n)
    with pytest.raises(ValueError, match="0.14.2"):
        M.deepspeed_estimate(psi, 2, n, version="latest-ish")


def test_activations_korthikanti_equations():
    s, b, h, a, L = 2048, 1, 4096, 32, 32
    sbh = s * b * h
    eq1 = sbh * (34 + 5 * a * s / h)
    assert M.per_layer(s, b, h, a) == eq1
    for t in (2, 4, 8):
        assert M.per_layer(s, b, h, a, tp=t) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
        assert M.per_layer(s, b, h, a, tp=t, sequence_parallel=True) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
        assert M.per_layer(s, b, h, a, tp=t, sequence_parallel=True, checkpointing="selective") == \
            pytest.approx(34 * sbh / t)
    assert M.per_layer(s, b, h, a, checkpointing="full") == 2 * sbh
    assert M.per_layer(s, b, h, a, tp=8, sequence_parallel=True, checkpointing="full") == 2 * sbh / 8
    assert M.per_layer(s, b, h, a, bytes_per_value=4) == sbh * 66 + 9 * a * s * s * b   # fp32 values
    act = M.activations(L, h, a, s, b)
    assert act.stored == L * eq1 and act.peak == L * eq1                        # 30.6 GB
    full = M.activations(L, h, a, s, b, checkpointing="full", vocab=32000)
    assert full.peak == L * 2 * sbh + eq1 + 4 * sbh + 4 * s * b * 32000


def test_fit_answers_with_the_numbers():
    f = M.fits(M.model_states(7e9, zero_stage=3, world_size=8), 10 * G, gpu_gb=24)
    assert f.needed == 24 * G and f.fits and f.margin == 0
    f = M.fits(M.model_states(7e9), M.activations(32, 4096, 32, 2048, 1), gpu_gb=80)
    assert str(f).startswith("does not fit: needs 142.6 GB") and "62.6 GB over an 80 GB GPU" in str(f)


def test_gpt_shape_matches_the_count():
    for n in (1e9, 7e9, 70e9, 175e9, 1e12):
        layers, h, a = M.gpt_shape(n)
        assert abs(12 * layers * h * h - n) <= 6 * h * h and h % a == 0


@pytest.mark.parametrize("call, words", [
    (lambda: M.model_states(7e9, precision="fp8"), "'fp32', 'bf16', 'fp16', 'mixed'"),
    (lambda: M.model_states(7e9, optimizer="lion"), "'sgd', 'momentum', 'adam', 'adamw', 'adam8bit'"),
    (lambda: M.model_states(7e9, zero_stage=4), "0, 1, 2, 3"),
    (lambda: M.model_states(0), "n_params must be a positive number"),
    (lambda: M.model_states(-7e9), "n_params must be a positive number"),
    (lambda: M.model_states(7e9, world_size=0), "world_size must be a whole number >= 1"),
    (lambda: M.model_states(7e9, world_size=2.5), "world_size must be a whole number >= 1"),
    (lambda: M.activations(32, 4096, 32, 0, 1), "seq must be a whole number >= 1"),
    (lambda: M.activations(32, 4096, 32, 2048, 1, checkpointing="some"), "'none', 'selective', 'full'"),
    (lambda: M.fits(1, 0, gpu_gb=0), "gpu_gb must be a positive number"),
])
def test_bad_input_lists_valid_choices(call, words):
    with pytest.raises(ValueError) as e:
        call()
    assert words in str(e.value)


def test_breakdown_arithmetic_and_table():
    a = M.Breakdown(params=10, grads=10, momentum=5, label="measured")
    b = M.Breakdown(params=10, grads=8, label="formula")
    d = a - b
    assert (d.params, d.grads, d.momentum, d.total) == (0, 2, 5, 7)
    assert (a + b).total == 43 and a.scaled(2).total == 50
    assert "momentum" in a.table(unit=1, name="B") and "total" in a.table()
    assert repr(M.model_states(7e9)).endswith("= 112.00 GB)")


def test_formulas_do_not_import_torch():
    import subprocess
    import sys
    code = "import sys, labkit.memory as M; M.model_states(7e9); M.activations(2,64,4,8,1); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
