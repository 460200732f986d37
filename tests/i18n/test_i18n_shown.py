"""Text shown in the learner's language without pieces: a list joined by `tr_join` (its separator
is a whole message, "{a}; {b}"), and a `ShownName`, a program value (a dict key, an argument)
that stays English for programs and is translated where it is formatted. Pure: no processes."""
import pytest

from labkit.capstone.trainer import WRONG
from labkit.i18n import ShownName, tr_join
from labkit.tables import Table


@pytest.fixture
def zh(monkeypatch):
    monkeypatch.setenv("LABKIT_LANG", "zh")


def test_a_shown_name_is_its_english_text_to_programs(zh):
    name = WRONG[0]
    assert isinstance(name, ShownName) and name == "loss not divided by micro-batches"
    assert {name: 1}["loss not divided by micro-batches"] == 1
    assert str(name) == "loss not divided by micro-batches" and repr(name) == repr(str(name))


def test_a_shown_name_is_formatted_in_the_learners_language(zh, monkeypatch):
    name = WRONG[0]
    assert f"{name}: leaves the bound" == "loss 没有除以 micro-batch 数: leaves the bound"
    assert "loss 没有除以 micro-batch 数" in Table(["variant"], [[name]])
    monkeypatch.setenv("LABKIT_LANG", "en")
    assert f"{name}" == "loss not divided by micro-batches"
    assert "loss not divided by micro-batches" in Table(["variant"], [[name]])


def test_a_list_is_joined_in_the_learners_language(zh, monkeypatch):
    assert tr_join(["a", "b", "c"], "; ") == "a；b；c" and tr_join(["1", "2"]) == "1，2"
    assert tr_join([]) == "" and tr_join(["x"]) == "x"
    monkeypatch.setenv("LABKIT_LANG", "en")
    assert tr_join(["a", "b", "c"], "; ") == "a; b; c" and tr_join(["1", "2"]) == "1, 2"
