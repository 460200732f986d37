"""The last English that labkit printed in the Chinese copies, in Chinese (pure: no cluster,
no process): 05a's strategy notes, 03's benchmark summary, table cells that show library values
(checkpointing modes, Breakdown categories), and learners' argument errors of the pipeline
formulas, gradient accumulation, context parallelism and the all-to-all.

Each test prints through the library with LABKIT_LANG=zh and asserts the Chinese text with the
English case's numbers; the English output and the values code compares stay as they were.
"""
import pytest

from labkit.i18n import zh


@pytest.fixture
def zh_lang(monkeypatch):
    monkeypatch.setenv("LABKIT_LANG", "zh")


# -- 05a: what each sharding strategy means (Strategy.note, shown in section 1's table) -------
def test_strategy_notes_are_shown_in_chinese_and_the_data_stays(monkeypatch):
    from labkit.fsdp.strategies import STRATEGIES
    monkeypatch.delenv("LABKIT_LANG", raising=False)
    assert STRATEGIES["no_shard"].note == "every rank holds everything; gradients all-reduced, as DDP"
    monkeypatch.setenv("LABKIT_LANG", "zh")
    assert STRATEGIES["no_shard"].note == "每个 rank 都持有全部参数和状态；梯度做 all-reduce，与 DDP 相同"
    for name, s in STRATEGIES.items():
        assert s.note == zh.MESSAGES[s.about] != s.about, name
        assert s.name == name and s.fsdp1.isupper()          # what programs compare: English


# -- 03: the DDP benchmark's table and summary (labkit/ddp/benchmark.py) -----------------------
def _bench_result(config, seconds, memory=None):
    return {"config": config, "group": 0, "times": [seconds], "median": seconds, "sent": 3.0e6,
            "grad_bytes": 2.5e6, "memory": memory}


def test_ddp_benchmark_table_and_summary_in_chinese(zh_lang):
    from labkit.ddp import benchmark
    res = {"labkit naive": _bench_result(("naive", None, False), 0.030),
           "labkit flat": _bench_result(("flat", None, False), 0.020),
           "labkit bucketed 4 MB view": _bench_result(("bucketed", 4, True), 0.022, 2.5e6),
           "torch DDP 4 MB view": _bench_result(("torch", 4, True), 0.020, 2.5e6)}
    assert benchmark.summary(res).splitlines() == [
        "单步时间 labkit naive / flat = 1.50",
        "bucket_cap_mb=4, gradient_as_bucket_view：单步时间 labkit bucketed / torch DDP = 1.10"]
    lines = benchmark.table(res, 4).splitlines()
    assert lines[0] == "梯度 2.5 MB；环形 all-reduce 公式 2(N-1)/N x 梯度 = 每个 rank 每步 3.8 MB（N=4）。"
    assert lines[2] == "| 实现 | step ms | 与 torch DDP 之比（相同 cap 和 view） | 每步发送 MB | 发送/公式 | " \
                       "梯度+桶 MB | / 梯度 |"
    assert lines[6] == "| labkit bucketed 4 MB view | 22.0 | 1.10x | 3.0 | 0.800 | 2.5 | 1.00 |"
    assert lines[-1].startswith("step ms：最慢 rank 的单步时间的中位数。")


# -- library values a table shows: Breakdown categories (labkit.memory.accounting.table) -------
def test_memory_table_heads_its_categories_in_chinese(zh_lang):
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
