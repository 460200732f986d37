"""What the checkers and library of notebooks 02, 05a/05b and 06 say, in Chinese (pure: no
cluster; the diagnoses are built from logs and tensors, the way the ranks build them).

Each test sets LABKIT_LANG=zh, feeds a plausible wrong answer to the diagnosis, and asserts the
Chinese sentence with the same numbers as the English one, while the words programs read
(`FAIL`, the checker's name) stay English."""
import torch

from labkit.check import ring_diagnosis as why
from labkit.check.core import report


# -- notebook 02: ring_all_reduce ---------------------------------------------------------------
def _floor_cut_log():
    """Rank 0 of 2, length 7, chunks cut with 7 // 2 = 3: element 6 is never sent."""
    return [("isend", 1, 3, 3, True), ("irecv", 1, None, 3, True),
            ("isend", 1, 0, 3, True), ("irecv", 1, 3, 3, True)]


def test_ring_diagnoses_in_chinese(zh, capsys):
    text = why.dropped_remainder(_floor_cut_log(), 0, 2, 7)
    assert text.startswith("rank 0 从没发送 7 个元素中的第 6..6 个"), text
    assert "（7 // 2 = 3）" in text and "numel % n = 1 个元素" in text
    assert why.extra_bytes([], 1, 2, 7).startswith("和是对的，但 rank 1 没有发送任何点对点消息")
    missing = why.schedule([("isend", 1, 4, 3, True)], 0, 2, 7)       # the reduce-scatter only
    assert missing.startswith("rank 0 做了 1 次非空发送，环形算法在这里需要 2 次"), missing
    assert "（1 步 reduce-scatter + 1 步 all-gather）：少了一步" in missing
    unmet = why.unmatched({0: [("isend", 1, 0, 4, True)], 1: []})
    assert unmet == "rank 0 向 rank 1 发起了 1 次发送，而对方发起了 0 次来自 rank 0 的接收"
    report("ring_all_reduce", False, "world size 2" + "：" + missing)
    line = capsys.readouterr().out
    assert line.startswith("ring_all_reduce: FAIL (world size 2：rank 0 做了"), line


def test_ring_arithmetic_diagnoses_in_chinese(zh):
    from labkit.check.comm import _arithmetic, _wrong_values
    from labkit.comm.formulas import chunk_bounds
    x = torch.arange(7.0)
    expected = 2 * x + 1
    assert _arithmetic(expected / 2, x, expected, chunk_bounds(7, 2), 0, 2, 1e-6) == (
        "每个值都是和除以 2，即平均值：练习要的是和（dist.all_reduce 默认做的就是求和）；去掉这次除法")
    text = _wrong_values(x.clone(), x, x + 0, expected, [], 0, 2, 7, torch.float32)
    assert text.startswith("rank 0：你的函数没有改动 `tensor`，而是返回了一个新张量：练习要求原地 all-reduce")


def test_ring_watch_words_in_chinese(zh):
    from labkit.check.ring_watch import _who
    assert _who(None, 5) == "全局 rank 5，它不在这个进程组里"
    assert _who(2, 3) == "rank 2"


# -- notebooks 05a/05b: fsdp_budget ------------------------------------------------------------
def test_fsdp_budget_diagnoses_in_chinese(zh):
    from labkit.check.fsdp import _validate
    fsdp1 = dict(wrap="block", strategy="FULL_SHARD", precision="bf16", offload=True)
    assert _validate(fsdp1) == ("strategy='FULL_SHARD' 是 FSDP1 的名字（ShardingStrategy.FULL_SHARD）；"
                                "labkit.fsdp.shard 用的是 FSDP2 的写法：strategy='full'")
    fp16 = dict(fsdp1, strategy="full", precision="fp16")
    assert _validate(fp16) == ("precision='fp16' 既不是 'fp32' 也不是 'bf16'"
                               "（fp16 需要损失缩放器；这里 FSDP2 的混合精度策略用 bf16）")
    no_offload = dict(wrap="block", strategy="full", precision="bf16")
    assert _validate(no_offload) == ("这个 dict 的键必须恰好是 ['wrap', 'strategy', 'precision', "
                                     "'offload']；缺少 ['offload']")


# -- notebook 06: row_parallel -----------------------------------------------------------------
def _row_parallel_case(t=2):
    """What `labkit.check.tp._case` gives rank 0 of t, computed on one process."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 16, generator=g, dtype=torch.float64)
    w = torch.randn(6, 16, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64) + 1.0
    cols = slice(0, 16 // t)
    return {"t": t, "ref_y": x @ w.t() + b, "partial": x[..., cols] @ w[:, cols].t(), "bias": b}


def test_row_parallel_diagnoses_in_chinese(zh):
    from labkit.check.tp import diagnose
    from labkit.check.tp_agreed import mismatch_text
    res = _row_parallel_case()
    twice = diagnose(dict(res, y=res["ref_y"] + res["bias"]), 0)
    assert twice == ("rank 0：bias 被算了 2 次：每个 rank 都在 all-reduce 之前加了 bias。"
                     "先对部分积求和，再只加一次 bias")
    double = diagnose(dict(res, y=2 * res["ref_y"]), 1)
    assert double.startswith("rank 1：输出是正确值的 2 倍（2 即 rank 数：在各 rank 上多求和了一次"), double
    text = mismatch_text(["all_reduce((3, 5, 6) float64, op=SUM)", "returned from forward"], 1,
                          "forward")
    assert text.startswith("各 rank 在 forward 的第 1 个集合通信上不一致：rank 0 调用了 "
                           "all_reduce((3, 5, 6) float64, op=SUM)；rank 1 从 forward 返回了。"), text


def test_row_parallel_english_is_unchanged():
    from labkit.check.tp_agreed import mismatch_text
    text = mismatch_text(["x", "x", "returned from backward"], 2, "backward")
    assert text.startswith("the ranks disagree at the 2nd collective of backward: ranks 0, 1 "
                           "called x; rank 2 returned from backward. Every rank must"), text
