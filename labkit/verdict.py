"""The words a verdict is printed in, one place for the library, the checkers and the tests.

Two kinds of line say that something the course claims did not hold:

- a checker's ``name: FAIL (what differs, where, what to do)`` (`labkit.check.core.report`);
- a measurement set against its formula, printed by `verdict`: ``ok: ...`` when it holds,
  ``MISS: ...`` when it does not.

Both are plain lines, never exceptions, so a learner in JupyterLab reads them in the cell. When
the notebooks run under pytest (nbval), the repository's ``conftest.py`` fails a cell whose
output holds such a line (`failing_lines`), unless the cell is tagged `EXPECT_FAIL_TAG`, which a
cell that shows a FAIL on purpose carries (and then it must show one). A line printed on a rank
arrives as ``[rank N] ...`` and counts too. Pure: no torch, no processes.

Under nbgrader (its autograder and validator set ``NBGRADER_EXECUTION``) a checker's FAIL or
"not implemented yet" line is followed by `WrongAnswer`, the exception nbgrader counts as a
failed test cell (`graded`); inside a grading cell that splits its points over several checker
calls (`labkit.grading.cases`) the verdicts are recorded instead. A learner's own run never raises.
"""
import os
import re

FAIL = "FAIL"               # a checker's word for "your code is wrong"
OK, MISS = "ok:", "MISS:"   # how a measured-vs-formula verdict starts
EXPECT_FAIL_TAG = "expect-fail"     # cell metadata tag: this cell shows a FAIL on purpose

_RANK = r"(?:\[rank \d+\] )?"
_FAILING = re.compile(rf"^{_RANK}(?:[\w.]+: {FAIL}(?: \(|$)|{re.escape(MISS)} )")


def verdict(ok: bool, text: str) -> bool:
    """Print one line, ``ok: text`` or ``MISS: text``, and return ok. For a measurement set
    against the formula it tests: say both numbers and the tolerance in `text`. `text` is
    looked up in the learner's catalog as it is (a notebook's f-string is translated in the
    notebook's translation instead, on a line marked ``# 译文``); ``ok:``/``MISS:`` never are."""
    from labkit.i18n.messages import catalog
    from labkit.i18n.lang import lang
    print(f"{OK if ok else MISS} {catalog(lang()).get(text, text)}")
    return bool(ok)


def failing_lines(text: str) -> list:
    """The lines of `text` that say a check failed: a checker's ``name: FAIL`` or a ``MISS:``."""
    return [ln for ln in text.splitlines() if _FAILING.match(ln)]


_MEASURED = re.compile(rf"^{_RANK}(?:{re.escape(OK)}|{re.escape(MISS)}) ")


def measured_lines(text: str) -> list:
    """The lines of `text` that `verdict` printed, kept (``ok:``) or missed (``MISS:``)."""
    return [ln for ln in text.splitlines() if _MEASURED.match(ln)]


GRADING_ENV = "NBGRADER_EXECUTION"     # set by nbgrader's autograde ("autograde") and validate


class WrongAnswer(AssertionError):
    """A checker's verdict was not pass, under nbgrader: the test cell loses its points."""


LEDGER = []          # [(name, ok)] of the checker calls of an open grading cell (labkit.grading)
_open = [False]


def grading() -> bool:
    return bool(os.environ.get(GRADING_ENV))


def graded(name: str, ok: bool, line: str) -> None:
    """After a checker printed `line`: record it in an open grading cell, else raise WrongAnswer
    under nbgrader when it is not a pass. Nothing at all in a learner's own run."""
    if _open[0]:
        LEDGER.append((name, bool(ok)))
    elif not ok and grading():
        raise WrongAnswer(line)
