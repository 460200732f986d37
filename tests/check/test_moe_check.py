"""labkit.check.ep_dispatch against its corpus (tests/check_corpus/moe.py): right answers pass,
each wrong one gets its diagnosis within 3 s with the ranks kept (the hang: fresh ranks after)."""
import os

import pytest

from check_corpus import moe
from support.checker_line import checker_line

pytestmark = pytest.mark.cluster   # starts ranks

JUDGE_S, TIMEOUT, HANG_TIMEOUT = 3.0, 30.0, 4.0


def test_right_answers_pass(capsys, cluster):
    for name, fn in moe.RIGHT:
        ok, line, _ = checker_line(capsys, "ep_dispatch", fn, cluster=cluster, timeout=TIMEOUT)
        assert ok and line.startswith("ep_dispatch: pass ("), (name, line)


@pytest.mark.parametrize("name, fn, words", [w[:3] for w in moe.WRONG if w[3] == "clean"],
                         ids=[w[0].replace(" ", "_") for w in moe.WRONG if w[3] == "clean"])
def test_wrong_answer_is_diagnosed_and_keeps_the_ranks(capsys, cluster2, name, fn, words):
    pids = cluster2.run(os.getpid)
    ok, line, took = checker_line(capsys, "ep_dispatch", fn, cluster=cluster2, timeout=TIMEOUT)
    assert not ok and words in line, line
    assert took < JUDGE_S, f"{name}: judged in {took:.2f} s"
    assert cluster2.run(os.getpid) == pids, "the ranks were replaced"


def test_deadlocking_send_is_reported_and_the_next_run_works(capsys, cluster2):
    name, fn, words, _ = next(w for w in moe.WRONG if w[3] == "hang")
    ok, line, took = checker_line(capsys, "ep_dispatch", fn, cluster=cluster2, timeout=HANG_TIMEOUT)
    assert not ok and words in line and "send" in line, line
    assert cluster2.run(lambda: 1) == [1, 1]


def test_the_second_case_survives_a_rebuilt_process_group(capsys, cluster2):
    """The groups of the second case are made once per process; after the cluster rebuilt its
    process group (Cluster._rejoin, as after a failed collective) they are made again."""
    ok, line, _ = checker_line(capsys, "ep_dispatch", moe.RIGHT[0][1], cluster=cluster2, timeout=TIMEOUT)
    assert ok, line
    cluster2._rejoin()
    ok, line, _ = checker_line(capsys, "ep_dispatch", moe.RIGHT[0][1], cluster=cluster2, timeout=TIMEOUT)
    assert ok, line
