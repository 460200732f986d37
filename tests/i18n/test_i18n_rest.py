"""The last English that labkit printed in the Chinese copies, in Chinese (pure: no cluster,
no process): 05a's strategy notes, 03's benchmark summary, table cells that show library values
(checkpointing modes, Breakdown categories), and learners' argument errors of the pipeline
formulas, gradient accumulation, context parallelism and the all-to-all.

Each test prints through the library with LABKIT_LANG=zh and asserts the Chinese text with the
English case's numbers; the English output and the values code compares stay as they were.
"""
import pytest

from labkit.i18n.messages import messages


# -- 05a: what each sharding strategy means (Strategy.note, shown in section 1's table) -------
def test_strategy_notes_are_shown_in_chinese_and_the_data_stays(monkeypatch):
    from labkit.fsdp.strategies import STRATEGIES
    monkeypatch.delenv("LABKIT_LANG", raising=False)
    assert STRATEGIES["no_shard"].note == "every rank holds everything; gradients all-reduced, as DDP"
    monkeypatch.setenv("LABKIT_LANG", "zh")
    assert STRATEGIES["no_shard"].note == "每个 rank 都持有全部参数和状态；梯度做 all-reduce，与 DDP 相同"
    for name, s in STRATEGIES.items():
        assert s.note == messages("zh")[s.about] != s.about, name
        assert s.name == name and s.fsdp1.isupper()          # what programs compare: English


# -- 05a, 05b, 06: labels that are data (dict keys, knob names) and shown translated -----------
def test_row_labels_that_are_data_are_shown_in_chinese_and_stay_english_as_data(monkeypatch):
    from labkit.fsdp.accumulate_knobs import KNOBS
    from labkit.fsdp.runs import PEAK_NAMES
    from labkit.i18n import tr
    from labkit.tp.vocab import logits_bytes
    ways = list(logits_bytes(512, 4096, 4))
    monkeypatch.setenv("LABKIT_LANG", "en")
    assert KNOBS == ("sync every micro-batch", "no sync", "no sync, keep unsharded")
    assert ways == ["one device", "gathered, then cross-entropy", "loss parallel"]
    assert [tr(k) for k in KNOBS] == list(KNOBS) and [tr(w) for w in ways] == ways
    monkeypatch.setenv("LABKIT_LANG", "zh")
    assert [tr(k) for k in KNOBS] == ["每个 micro-batch 都同步", "不同步", "不同步，且保持不重新分片"]
    assert [tr(w) for w in ways] == ["单卡", "先 all-gather 再算交叉熵", "loss 并行"]
    assert tr(PEAK_NAMES["UNSHARDED_PARAM"]) == "all-gather 后的完整参数"      # the glossary's "gathered"
    untranslated = [v for v in PEAK_NAMES.values() if tr(v) == v]
    assert not untranslated, untranslated


# -- 03: the DDP benchmark's table and summary (labkit/ddp/benchmark.py) -----------------------
def _bench_result(config, seconds, memory=None):
    return {"config": config, "group": 0, "times": [seconds], "median": seconds, "sent": 3.0e6,
            "grad_bytes": 2.5e6, "memory": memory}


def test_ddp_benchmark_table_and_summary_in_chinese(zh):
    from labkit.ddp import benchmark
    res = {"labkit naive": _bench_result(("naive", None, False), 0.030),
           "labkit flat": _bench_result(("flat", None, False), 0.020),
           "labkit bucketed 4 MB view": _bench_result(("bucketed", 4, True), 0.022, 2.5e6),
           "torch DDP 4 MB view": _bench_result(("torch", 4, True), 0.020, 2.5e6)}
    assert benchmark.summary(res).splitlines() == [
        "单步时间之比 labkit 朴素实现 / 扁平 = 1.50",
        "bucket_cap_mb=4, gradient_as_bucket_view：单步时间之比 labkit 分桶实现 / torch DDP = 1.10"]
    lines = benchmark.table(res, 4).splitlines()
    assert lines[0] == "梯度 2.5 MB；环形 all-reduce 公式 2(N-1)/N × 梯度 = 每个 rank 每步 3.8 MB（N=4）。"
    assert lines[2] == "| 实现 | step ms | 与 torch DDP 之比（相同 cap 和 view） | 每步发送 MB | 发送/公式 | " \
                       "梯度+桶 MB | / 梯度 |"
    assert lines[6] == "| labkit bucketed 4 MB view | 22.0 | 1.10x | 3.0 | 0.800 | 2.5 | 1.00 |"
    assert lines[-1].startswith("step ms：最慢 rank 的单步时间的中位数。")


# -- library values a table shows: Breakdown categories (labkit.memory.accounting.table) -------
def test_memory_table_heads_its_categories_in_chinese(zh):
    from labkit.memory.accounting import table
    from labkit.memory.breakdown import Breakdown
    got = Breakdown(params=1000, grads=1000, momentum=2000, variance=2000, other=8, buffers=4, temporary=2,
                    label="rank 0 measured")
    formula = Breakdown(params=1000, grads=1000, momentum=2000, variance=2000, label="formula: SGD")
    t = table([got], formula)
    assert t.header == ["", "参数", "梯度", "一阶动量 m", "二阶动量 v", "其他", "缓冲区", "临时张量", "合计",
                        "实测 - 公式"]
    assert t.rows == [["rank 0", "1,000", "1,000", "2,000", "2,000", "8", "4", "2", "6,014", "14"],
                      ["公式", "1,000", "1,000", "2,000", "2,000", "0", "0", "0", "6,000", ""]]
    assert t.title == "字节"


# -- argument errors a learner meets in lower-level modules ------------------------------------
def test_pipeline_formula_arguments_are_refused_in_chinese(zh):
    from labkit.pipeline.formulas import bubble_ratio, first_stage_activations
    with pytest.raises(ValueError) as err:
        bubble_ratio(4, 0)
    assert str(err.value) == "microbatches 必须是 >= 1 的整数，收到的是 0（stages=4，microbatches=0，chunks=1）"
    with pytest.raises(ValueError) as err:
        first_stage_activations("zb-2p", 4, 8)
    assert str(err.value).startswith("没有 'zb-2p' 的公式：请从 gpipe、1f1b、interleaved、")


def test_accumulation_and_all_to_all_arguments_are_refused_in_chinese(zh):
    import torch
    from labkit.moe.alltoall import all_to_all
    from labkit.tricks.accumulation import accumulate
    with pytest.raises(ValueError) as err:
        accumulate(None, torch.zeros(6, 3), torch.zeros(6, 3), micro=4)
    assert str(err.value) == "大小为 6 的 batch 无法均分成 4 个相同大小的 micro-batch"
    with pytest.raises(ValueError) as err:
        all_to_all(torch.zeros(2, 3), [1, 1], [1, 1], impl="nccl")
    assert str(err.value) == "impl 必须是 ('torch', 'p2p') 之一，收到的是 'nccl'"


# one rank's row as labkit.cp.shard.agree gathers it: q, k, v shapes, causal, method, layout
_ROW = [1, 4, 8, 16, 1, 4, 8, 16, 1, 4, 8, 16, 1, 0, 0]


def _row(**at):
    row = list(_ROW)
    for i, x in at.items():
        row[int(i[1:])] = x
    return row


@pytest.mark.parametrize("rows, layout, english, chinese", [
    ([_ROW, _row(i3=32)], "contiguous",
     "rank 1 has head size = 32 but rank 0 has 16: every rank must call attention with the same shapes",
     "rank 1 的 每头维度 = 32，而 rank 0 的是 16：每个 rank 调用 attention 时的形状和选项都必须相同"),
    ([_ROW, _row(i6=9)], "contiguous",
     "rank 1: q, k and v hold 8, 9 and 8 positions; give each rank the same positions",
     "rank 1：q、k、v 分别有 8、9、8 个位置；每个 rank 上的 q、k、v 必须是同一段位置"),
    ([_row(i5=3, i9=3)] * 2, "contiguous",
     "rank 0: 4 query heads do not divide into groups of the 3 K/V heads",
     "rank 0：4 个 query 头无法平均分给 3 个 K/V 头"),
    ([_row(i2=1, i6=1, i10=1)] * 2, "zigzag",
     "rank 1: a sequence of 2 positions cannot be split into the 4 chunks the zigzag layout needs on 2 ranks",
     "rank 1：2 个位置的序列无法切成 zigzag 布局在 2 个 rank 上所需的 4 块（每个 rank 2 块）"),
    ([_row(i2=9, i6=9, i10=9), _row(i2=7, i6=7, i10=7)], "zigzag",
     "rank 0 holds 9 positions but the zigzag layout of 16 positions on 2 ranks gives it 8",
     "rank 0 持有 9 个位置，但把 16 个位置按 zigzag 布局分到 2 个 rank 上，它应得 8 个"),
])
def test_context_parallel_shape_errors_in_english_and_chinese(monkeypatch, rows, layout, english, chinese):
    from labkit.cp.shard import check_rows
    for lang, want in (("en", english), ("zh", chinese)):
        monkeypatch.setenv("LABKIT_LANG", lang)
        with pytest.raises(ValueError) as err:
            check_rows(rows, 1, method="ring", layout=layout)
        assert str(err.value).startswith(want), (lang, str(err.value))
    assert check_rows([_ROW, _ROW], 1, method="ring", layout="contiguous") == 16
