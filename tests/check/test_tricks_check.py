"""Notebook 09's checker against its corpus of wrong answers (tests/check_corpus/accum.py):
each gets its diagnosis within JUDGE_S seconds and leaves the ranks running; right answers pass."""
import os

import pytest

from check_corpus import accum
from support.checker_line import checker_line

JUDGE_S = 3.0


def test_right_answers_pass(capsys, cluster):
    pids = cluster.run(os.getpid)
    for name, fn in accum.RIGHT:
        ok, line, _ = checker_line(capsys, "accumulate_gradients", fn, cluster=cluster, timeout=30)
        assert ok and line.startswith("accumulate_gradients: pass ("), (name, line)
    assert cluster.run(os.getpid) == pids


@pytest.mark.parametrize("answer, fn, words, kind", accum.WRONG, ids=[w[0].replace(" ", "_") for w in accum.WRONG])
def test_wrong_answer_is_diagnosed_quickly_and_keeps_the_ranks(capsys, cluster2, answer, fn, words, kind):
    # on 2 ranks, the notebook's cluster: an answer that averages with rank 1 - r is right there,
    # and must fail on the checker's second case (another world size)
    pids = cluster2.run(os.getpid)
    ok, line, took = checker_line(capsys, "accumulate_gradients", fn, cluster=cluster2, timeout=30)
    assert not ok and words in line, line
    assert line.startswith(("accumulate_gradients: FAIL (", "accumulate_gradients: not implemented yet")), line
    assert took < JUDGE_S, f"{answer}: judged in {took:.2f} s"
    assert cluster2.run(os.getpid) == pids, "the ranks were replaced"


def test_right_answers_pass_within_one_all_reduce_and_one_micro_batch(capsys, cluster):
    """The pass line says 1.00x: the right answers measure it (a flat all-reduce less)."""
    for name, fn in accum.RIGHT:
        ok, line, _ = checker_line(capsys, "accumulate_gradients", fn, cluster=cluster, timeout=30)
        assert ok and "saved activations 1.00x one micro-batch's" in line, (name, line)
        ratio = float(line.split("; ")[-2].split("x the bytes")[0])
        assert ratio <= 1.0, (name, line)


def test_corpus_size():
    assert len(accum.WRONG) >= 8 and len(accum.RIGHT) >= 2
    assert len({w[0] for w in accum.WRONG}) == len(accum.WRONG)


def test_the_second_case_survives_a_rebuilt_process_group(capsys, cluster2):
    """The groups of the second world size are made once per process, and again after the
    cluster rebuilt its process group (Cluster._rejoin)."""
    assert checker_line(capsys, "accumulate_gradients", accum.RIGHT[0][1], cluster=cluster2, timeout=30)[0]
    cluster2._rejoin()
    ok, line, _ = checker_line(capsys, "accumulate_gradients", accum.RIGHT[0][1], cluster=cluster2, timeout=30)
    assert ok, line
