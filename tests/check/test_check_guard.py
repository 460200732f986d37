"""The checkers' guard (labkit/check/guard.py): whatever the learner's code raises on one rank,
every rank learns it at once, the checker prints its one line, and the ranks are kept."""
import time

import pytest

import labkit
import labkit.check

pytestmark = pytest.mark.cluster


def _interrupt_on_rank_1(model):
    if labkit.rank() == 1:                         # the other rank goes on to the guard's settle
        raise KeyboardInterrupt("the learner's own Ctrl-C")


def _unprintable_on_rank_0(model):
    class Odd(Exception):
        def __str__(self):
            raise ValueError("no text")
    if labkit.rank() == 0:
        raise Odd()


@pytest.mark.parametrize("answer", [_interrupt_on_rank_1, _unprintable_on_rank_0],
                         ids=["KeyboardInterrupt", "str() fails"])
def test_any_exception_on_one_rank_is_judged_at_once_and_ranks_kept(cluster2, capsys, answer):
    pids = cluster2.run(lambda: __import__("os").getpid())
    t0 = time.perf_counter()
    ok = labkit.check.average_gradients(answer, timeout=30)
    took = time.perf_counter() - t0
    out = capsys.readouterr().out
    line = [ln for ln in out.splitlines() if ln.startswith("average_gradients:")]
    assert ok is False and len(line) == 1 and "FAIL" in line[0], out
    assert took < 5, f"judged after {took:.1f} s: the other rank waited for the checker's timeout"
    assert cluster2.run(lambda: __import__("os").getpid()) == pids, "the ranks were replaced"
