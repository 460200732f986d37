"""The checkers' autograde mode (labkit.verdict.graded, labkit.grading.cases/score), without
nbgrader and without ranks: a learner's run never raises; under NBGRADER_EXECUTION a FAIL or a
stub raises WrongAnswer; a grading cell's points are split over its checker calls."""
import pytest

import labkit.grading as grading
from labkit.check.core import not_implemented, report
from labkit.verdict import GRADING_ENV, WrongAnswer


def test_a_learners_run_prints_one_line_and_never_raises(monkeypatch, capsys):
    monkeypatch.delenv(GRADING_ENV, raising=False)
    assert report("x", False, "wrong") is False
    assert not_implemented("x") is False
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "x: FAIL (wrong)" and out[1].startswith("x: not implemented yet")


@pytest.mark.parametrize("mode", ["autograde", "validate"])
def test_under_nbgrader_a_wrong_answer_or_a_stub_raises(monkeypatch, capsys, mode):
    monkeypatch.setenv(GRADING_ENV, mode)
    assert report("x", True, "fine") is True
    with pytest.raises(WrongAnswer, match=r"x: FAIL \(wrong\)"):
        report("x", False, "wrong")
    with pytest.raises(WrongAnswer, match="not implemented yet"):
        not_implemented("x")
    assert capsys.readouterr().out.count("x: ") == 3          # the line is printed first


def test_partial_credit_over_the_checker_calls(monkeypatch, capsys):
    monkeypatch.setenv(GRADING_ENV, "autograde")
    grading.cases(5)
    report("x", True)
    report("x", False, "hidden case")
    assert grading.score() == 2.5
    grading.cases(5)
    report("x", False, "a")
    report("x", False, "b")
    with pytest.raises(WrongAnswer):
        grading.score()
    with pytest.raises(WrongAnswer):                   # the cell is closed: a FAIL raises again
        report("x", False, "after")


def test_the_tests_cell_hides_cases_and_score():
    src = grading.test_source("labkit.check.accumulate_gradients(accumulate);")
    lines = src.splitlines()
    assert "labkit.check.accumulate_gradients(accumulate, micro=4);" in lines
    visible, hidden = [], False
    for ln in lines:
        if "BEGIN HIDDEN TESTS" in ln or "END HIDDEN TESTS" in ln:
            hidden = "BEGIN" in ln
        elif not hidden:
            visible.append(ln)
    assert visible == ["labkit.check.accumulate_gradients(accumulate);"]
