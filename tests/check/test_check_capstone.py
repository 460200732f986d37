"""labkit.check.capstone_groups (notebook 14's exercise) against its corpus
(tests/check_corpus/capstone.py): the right answers pass, each wrong one gets its diagnosis in
one line, judged without processes; then one run on real ranks (4: dp 2 x tp 2, ep 2)."""
import os
import time

import pytest

from check_corpus import capstone
from support.checker_line import checker_line


@pytest.mark.parametrize("answer, fns", capstone.RIGHT, ids=[a[0] for a in capstone.RIGHT])
def test_right_answers_pass_without_ranks(capsys, answer, fns):
    ok, line, _ = checker_line(capsys, "capstone_groups", *fns, cluster=False)
    assert ok and line.startswith("capstone_groups: pass (the grid equals the notes' on 8 layouts"), line


@pytest.mark.parametrize("answer, fns, words", capstone.WRONG, ids=[a[0] for a in capstone.WRONG])
def test_wrong_answer_is_diagnosed(capsys, answer, fns, words):
    t0 = time.perf_counter()
    ok, line, _ = checker_line(capsys, "capstone_groups", *fns, cluster=False, timeout=2.0)
    assert not ok and words in line, line
    assert line.startswith(("capstone_groups: FAIL (", "capstone_groups: not implemented yet")), line
    assert time.perf_counter() - t0 < 2.0 + 3.0


def test_the_corpus_is_large_and_names_are_unique():
    assert len(capstone.WRONG) >= 20 and len(capstone.RIGHT) >= 2
    assert len({w[0] for w in capstone.WRONG}) == len(capstone.WRONG)


def test_every_rule_dimension_is_diagnosed_both_ways():
    """Each dimension of RULE, dropped or added, gets a sentence (no KeyError in the checker)."""
    from labkit.check.capstone_judge import KINDS, NAMES, RULE, judge_rule
    for kind in KINDS:
        for d in NAMES:
            dims = RULE[kind] ^ {d}
            ok, detail = judge_rule(lambda k, kind=kind, dims=dims: sorted(dims if k == kind else RULE[k]))
            assert not ok and f"reduce_over({kind!r})" in detail, (kind, d, detail)


def test_the_ranks_sum_what_the_rule_says():
    """The reference the real run is judged by (_want) is the rule's group on every layout."""
    from labkit.check.capstone import _want, layout, ranks_layout
    for world in (4, 8, 16):
        shape = ranks_layout(world)
        lay = layout(*shape)
        for r in range(world):
            c = lay.coords(r)
            rep = {q for q in range(world) if lay.coords(q).pp == c.pp}
            split = {q for q in rep if lay.coords(q).tp == c.tp}
            assert _want(shape, r, "replicated") == sum(2 ** q for q in rep)
            assert _want(shape, r, "tp_split") == sum(2 ** q for q in split)
            assert _want(shape, r, "expert") == sum(2 ** q for q in lay.group_of(r, "edp"))


def test_on_real_ranks(capsys, cluster4):
    pids = cluster4.run(os.getpid)
    ok, line, _ = checker_line(capsys, "capstone_groups", capstone.grid, capstone.rule, cluster=cluster4)
    assert ok and "on 4 ranks (dp 2 x pp 1 x tp 2 x cp 1, ep 2) every gradient sums the ranks" in line, line
    ok, line, _ = checker_line(capsys, "capstone_groups", capstone.grid, capstone.tp_for_all, cluster=cluster4)
    assert not ok and "tp does not belong there" in line, line
    assert cluster4.run(os.getpid) == pids


def test_chinese(capsys):
    import labkit
    labkit.set_lang("zh")
    try:
        ok, line, _ = checker_line(capsys, "capstone_groups", capstone.grid, capstone.no_cp_rule, cluster=False)
    finally:
        labkit.set_lang("en")
    assert not ok and line.startswith("capstone_groups: FAIL (") and "cp" in line
    assert any("\u4e00" <= ch <= "\u9fff" for ch in line), line
