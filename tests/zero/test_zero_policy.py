"""ZeRO-3 mixed precision in both layouts (labkit.zero.policy): fp32 shards as masters (FSDP2's)
or 16-bit shards with fp32 masters in the optimizer (DeepSpeed's), bf16 and fp16; memory per rank
to the byte against the formula, the dtype of every collective, and parity with one process that
keeps fp32 weights and gradients and casts every parameter for compute.

Tolerances (2 SGD steps, lr 0.1, parameters up to about 1 in size):
- fp32 shards: each rank's gradient leaves backward rounded to 16 bits (one process rounds the
  global batch's gradient once) and a 16-bit reduction rounds the sum again: 2^-8 relative in
  bf16 on gradients below about 0.2, times lr, twice: 2e-4 (measured on 2 ranks: 1e-7 reduced in
  fp32, 7e-5 in bf16; on 4 ranks 2e-5 for fp16 reduced in fp32).
- 16-bit shards: the parameters themselves are rounded to 16 bits after each step: half a unit in the
  last place of the largest parameter (2^-8 relative in bf16, 2^-11 in fp16)."""
import pytest
import torch

from labkit.zero.policy import Policy, bytes_per_rank, traffic_per_rank
from labkit.zero.precision_runs import policy_report

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def test_policy_checks_and_bytes():
    with pytest.raises(ValueError, match="layout"):
        Policy(BF16, None, "fsdp")
    with pytest.raises(ValueError, match="param_dtype"):
        Policy(FP32)
    ds, fs = bytes_per_rank(Policy(BF16, layout="masters"), 1000, 4), bytes_per_rank(Policy(BF16), 1000, 4)
    assert ds == dict(params=500, grads=500, master=1000, optimizer=2000)
    assert fs == dict(params=1000, grads=1000, master=0, optimizer=2000)
    assert sum(ds.values()) == sum(fs.values()) == 16 * 1000 / 4
    t = traffic_per_rank(Policy(FP16, FP32), 1000, 2)
    assert t["all-gather (forward)"] == (1000.0, "float16") and t["reduce-scatter"] == (2000.0, "float32")


def _check(rows, policy, tol):
    for r in rows:
        assert r["memory"].model_state == r["expected"].total.model_state, (r["rank"], r["memory"], r["expected"].total)
        assert (r["memory"].master == 0) == (policy.layout == "sharded")       # fp32 masters: where they live
        assert r["shard_dtype"] == str(policy.shard_dtype).replace("torch.", "")
        gather, reduce = (str(d).replace("torch.", "") for d in (policy.param_dtype, policy.reduce))
        assert set(r["collectives"]) == {("all-gather", gather), ("reduce-scatter", reduce)}
        assert r["expected_sent"] <= r["sent"] <= r["expected_sent"] * 1.02 + 2048 * 4
        assert r["max_diff"] <= tol(r), (r["rank"], r["max_diff"], tol(r))


@pytest.mark.parametrize("dtype,reduce,tol", [
    (BF16, FP32, lambda r: 2e-4), (FP16, None, lambda r: 2e-4), (BF16, None, lambda r: 2e-4)],
    ids=["bf16-reduce-fp32", "fp16", "bf16"])
def test_sharded_layout_fp32_masters_in_the_shards(cluster2, dtype, reduce, tol):
    _check(cluster2.run(policy_report, dtype, "sharded", reduce), Policy(dtype, reduce, "sharded"), tol)


@pytest.mark.parametrize("dtype,reduce,ulp", [(BF16, None, 2.0 ** -8), (FP16, FP32, 2.0 ** -11)], ids=["bf16", "fp16"])
def test_masters_layout_16bit_shards(cluster2, dtype, reduce, ulp):
    _check(cluster2.run(policy_report, dtype, "masters", reduce), Policy(dtype, reduce, "masters"),
           lambda r: ulp * r["max_param"] * 1.01)


def test_adam_memory_to_the_byte_on_4_ranks(cluster4):
    for layout in ("sharded", "masters"):
        for r in cluster4.run(policy_report, BF16, layout, None, 2, 1e-3, "adam"):
            assert r["memory"].model_state == r["expected"].total.model_state
            assert (r["memory"].master > 0) == (layout == "masters")


def test_policy_needs_stage_3(cluster2):
    def wrong():
        import labkit.zero
        from labkit.zero.runs import tiny_gpt
        try:
            labkit.zero.wrap(tiny_gpt(n_layer=1, n_embd=32, vocab=64, seq=8)[0], torch.optim.SGD, stage=2,
                             policy=Policy(), lr=0.1)
        except ValueError as e:
            return str(e)
    assert all("stage 3" in m for m in cluster2.run(wrong))


@pytest.mark.parametrize("dtype,reduce", [(BF16, FP32), (BF16, None), (FP16, None)], ids=["bf16-fp32", "bf16", "fp16"])
def test_sharded_layout_gives_fsdp2s_gradients_and_bytes(cluster2, dtype, reduce):
    from labkit.fsdp.parity import beside_fsdp2
    for r in cluster2.run(beside_fsdp2, dtype, reduce):
        assert r["names"]
        # bf16 on 2 ranks: the same arithmetic, bit for bit (a sum of two numbers has one order; on 4
        # ranks the two rings add in other orders, their shards being cut differently); fp16: FSDP2
        # divides by part of N before the fp16 reduction and the rest after (against overflow),
        # labkit after: one fp16 rounding apart
        assert r["max_grad_diff"] <= (0.0 if dtype == BF16 else 2.0 ** -11 * r["max_grad"]), r["max_grad_diff"]
        assert r["grad_dtypes"] == r["param_dtypes"] == {"fsdp2": ["torch.float32"], "labkit": ["torch.float32"]}
        gd, rd = (str(d).replace("torch.", "") for d in (dtype, reduce or dtype))
        assert set(r["fsdp2_bytes"]) == set(r["labkit_bytes"]) == {("all-gather", gd), ("reduce-scatter", rd)}
        ours, theirs = r["labkit_bytes"], r["fsdp2_bytes"]
        assert ours[("all-gather", gd)] == r["unpadded"]["all-gather"]          # 2 gathers of every unit
        assert ours[("reduce-scatter", rd)] == r["unpadded"]["reduce-scatter"]
        # FSDP2 pads each parameter's rows (a few hundred bytes here) and keeps the root unit
        # gathered from forward to backward (one gather of it less)
        rs = ("reduce-scatter", rd)
        assert 0 <= theirs[rs] - ours[rs] <= 0.002 * ours[rs]
        assert 0.95 * ours[("all-gather", gd)] <= theirs[("all-gather", gd)] < ours[("all-gather", gd)]
