"""Notebook 12's checker (labkit.check.online_softmax_merge) against its corpus: every wrong
merge judged with its diagnosis within 3 s, the ranks kept; right ones pass on the ranks."""
import os
import time

import pytest

import labkit.check
from check_corpus import merge

JUDGE_S = 3.0
NAME = "online_softmax_merge"


def _line(capsys, fn, cluster):
    t0 = time.perf_counter()
    ok = labkit.check.online_softmax_merge(fn, cluster=cluster, timeout=30)
    took = time.perf_counter() - t0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"{NAME}:")]
    assert len(lines) == 1, lines
    return ok, lines[0], took


def test_right_merges_pass_on_the_ranks(capsys, cluster4):
    for answer, fn in merge.RIGHT:
        ok, line, _ = _line(capsys, fn, cluster4)
        assert ok and line.startswith(f"{NAME}: pass (ring attention with your merge on 4 ranks"), (answer, line)


def test_wrong_merges_are_diagnosed_quickly_and_keep_the_ranks(capsys, cluster4):
    pids = cluster4.run(os.getpid)
    assert len(merge.WRONG) >= 10 and len({w[0] for w in merge.WRONG}) == len(merge.WRONG)
    for answer, fn, words, _kind in merge.WRONG:
        ok, line, took = _line(capsys, fn, cluster4)
        assert not ok and words in line, (answer, line)
        assert line.startswith((f"{NAME}: FAIL (", f"{NAME}: not implemented yet")), line
        assert took < JUDGE_S, f"{answer}: judged in {took:.2f} s"
    assert cluster4.run(os.getpid) == pids, "the ranks were replaced"
