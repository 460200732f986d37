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
