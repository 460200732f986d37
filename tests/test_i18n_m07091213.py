"""The checkers and library text of notebooks 07, 09, 12 and 13 in Chinese (LABKIT_LANG=zh).

Plausible wrong answers from each checker's own corpus get their diagnosis in Chinese with the
same numbers as in English, while the words programs read (`FAIL`, the checker's name) stay
English. Pure paths only: no cluster starts here (the checkers fail before they would run
anything on ranks, or the diagnosis is a pure function).
"""
import pathlib
import sys
import types

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


@pytest.fixture
def zh(monkeypatch):
    monkeypatch.setenv("LABKIT_LANG", "zh")


NO_CLUSTER = types.SimpleNamespace(world_size=4)   # never used: these answers fail before any run


# -- notebook 07: schedule_1f1b -----------------------------------------------------------------

def test_pipeline_diagnoses_in_chinese(zh):
    from test_pipeline_check import backward_first, gpipe_order, no_cooldown, no_warmup, warmup_reversed
    from labkit.check.pipeline import judge_1f1b
    expect = {
        no_warmup: "p=4, m=8：能跑通，但模拟出的气泡比例是 75.0%，而 1F1B 的是 (p-1)/(m+p-1) = 27.3%",
        gpipe_order: "stage 0 同时保留了 8 个 micro-batch 的激活值；1F1B 最多保留 p - r = 4 个",
        no_cooldown: "p=4, m=8：stage 0 从来没有执行 B5（micro-batch 5 的反向）",
        backward_first: "stage 3 先执行 B0（第 0 步），后执行 F0（第 1 步）：反向需要它自己那次前向的激活值",
        warmup_reversed: "死锁：4 个 stage 永远无法推进：stage 0 在第 1 步（B0）等待 stage 1 上的 B0",
    }
    for fn, want in expect.items():
        ok, detail = judge_1f1b(fn)
        assert not ok and want in detail, (fn.__name__, detail)


def test_pipeline_verdict_words_stay_english(zh, capsys):
    from test_pipeline_check import no_warmup
    from labkit.check.pipeline import schedule_1f1b
    assert not schedule_1f1b(no_warmup, cluster=NO_CLUSTER)
    out = capsys.readouterr().out
    assert out.startswith("schedule_1f1b: FAIL (p=4, m=8：能跑通，但模拟出的气泡比例是 75.0%"), out


def test_pipeline_validation_and_table_in_chinese(zh):
    from labkit.pipeline import F, B, validate
    from labkit.pipeline.compare import compare_schedules
    got = validate([[F(0), B(0)], [B(0), F(0)]])
    assert got == ["stage 1 先执行 B0（第 0 步），后执行 F0（第 1 步）：反向需要它自己那次前向的激活值"], got
    t = compare_schedules(4, 8)
    assert t.header[1] == "每个 rank 的空闲时间，模拟" and t.title.startswith("p=4 个 rank，m=8 个 micro-batch"), t
