"""Every exercise's checker against a corpus of wrong answers, each with the diagnosis it must
get, and of right answers in several styles, which must pass (tests/check_corpus/).

A wrong answer must be judged within JUDGE_S seconds with one line, and leave the same ranks
running, unless the learner's code really hangs or kills a rank: then the next run must work
(on fresh ranks)."""
import os

import pytest

import labkit
import labkit.check
from check_corpus import adam, grads, mean, ring
from support.checker_line import checker_line

JUDGE_S = 3.0           # seconds: a wrong answer is judged at least this fast
TIMEOUT = 30.0          # the checkers' timeout for answers that do not hang (a busy machine)
HANG_TIMEOUT = 4.0      # and for those that do: a hang is reported after it
EXERCISES = [("mean_over_ranks", mean, "cluster4"), ("ring_all_reduce", ring, "cluster4"),
             ("average_gradients", grads, "cluster2")]
JUDGED = {}             # (exercise, answer) -> seconds, for the summary at the end
# the answers that hang or kill a rank cost a cold start each; these run always (two hangs, one
# death whose peer sees "Connection reset by peer"), the rest with LABKIT_CORPUS_ALL=1
RECOVERY = {("ring_all_reduce", "deadlock"), ("average_gradients", "rank 1 dies"),
            ("mean_over_ranks", "only rank 0 all-reduces")}
ALL = os.environ.get("LABKIT_CORPUS_ALL") == "1"



def _params(kinds):
    out = []
    for name, module, fixture in EXERCISES:
        for answer, fn, words, kind in module.WRONG:
            if kind in kinds:
                out.append(pytest.param(name, module, fixture, (answer, fn), words,
                                        id=f"{name}-{answer.replace(' ', '_')}"))
    return out


@pytest.mark.parametrize("name, module, fixture", EXERCISES, ids=[e[0] for e in EXERCISES])
def test_right_answers_pass(capsys, request, name, module, fixture):
    cluster = request.getfixturevalue(fixture)
    pids = cluster.run(os.getpid)
    for answer, fn in module.RIGHT:
        ok, line, _ = checker_line(capsys, name, fn, cluster=cluster, timeout=TIMEOUT)
        assert ok and line.startswith(f"{name}: pass ("), (answer, line)
    assert cluster.run(os.getpid) == pids


@pytest.mark.parametrize("name, module, fixture, answer, words", _params({"clean"}))
def test_wrong_answer_is_diagnosed_quickly_and_keeps_the_ranks(capsys, request, name, module,
                                                               fixture, answer, words):
    cluster = request.getfixturevalue(fixture)
    pids = cluster.run(os.getpid)
    ok, line, took = checker_line(capsys, name, answer[1], cluster=cluster, timeout=TIMEOUT)
    JUDGED[(name, answer[0])] = took
    assert not ok and words in line, line
    assert line.startswith((f"{name}: FAIL (", f"{name}: not implemented yet")), line
    assert took < JUDGE_S, f"{answer[0]}: judged in {took:.2f} s"
    assert cluster.run(os.getpid) == pids, "the ranks were replaced"


@pytest.mark.parametrize("name, module, fixture, answer, words", _params({"hang", "crash"}))
def test_wrong_answer_that_hangs_or_crashes(capsys, cluster2, name, module, fixture, answer, words):
    if (name, answer[0]) not in RECOVERY and not ALL:
        pytest.skip("the ranks it leaves must be replaced (seconds each); LABKIT_CORPUS_ALL=1 runs it")
    ok, line, took = checker_line(capsys, name, answer[1], cluster=cluster2, timeout=HANG_TIMEOUT)
    JUDGED[(name, answer[0])] = took
    assert not ok and words in line, line
    assert took < HANG_TIMEOUT + 5, f"{answer[0]}: judged in {took:.2f} s"
    assert len(cluster2.run(os.getpid)) == 2           # the cluster works again (fresh ranks)


@pytest.mark.parametrize("answer, fn, words, kind", adam.WRONG, ids=[a[0] for a in adam.WRONG])
def test_mixed_adam_bytes_wrong_answers(capsys, answer, fn, words, kind):
    assert labkit.check.mixed_adam_bytes(fn) is False
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and words in line, line


def test_mixed_adam_bytes_right_answers(capsys):
    for answer, fn in adam.RIGHT:
        assert labkit.check.mixed_adam_bytes(fn) is True, capsys.readouterr().out


def test_every_exercise_has_a_corpus():
    for module in (mean, ring, grads, adam):
        assert len(module.WRONG) >= 8 and len(module.RIGHT) >= 2, module.__name__
        assert len({w[0] for w in module.WRONG}) == len(module.WRONG)


def test_zz_report_judge_times():
    """Not a check: prints the slowest judgements (run with -s to see them)."""
    if JUDGED:
        worst = sorted(JUDGED.items(), key=lambda kv: -kv[1])[:5]
        print("\nslowest judgements: " + "; ".join(f"{a} / {b}: {t:.2f} s" for (a, b), t in worst))


def test_the_rank_that_failed_first_is_named_not_the_one_that_lost_its_peer():
    from labkit.check.core import caught_verdict, describe_failure
    from labkit.check.guard import Caught
    from labkit.runtime.errors import Failure, RankError
    reset = "[../gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:0: Connection reset by peer"
    exc = RankError("x", {0: Failure(0, "RuntimeError", reset, ""),
                          1: Failure(1, "RankDied", "exited with code 3", "")})
    assert describe_failure(exc).startswith("failed on rank 1: RankDied")
    exc = RankError("x", {0: Failure(0, "RuntimeError", reset, ""),
                          2: Failure(2, "ValueError", "bad shape", "")})
    assert describe_failure(exc).startswith("failed on rank 2: ValueError: bad shape")
    first, late, lost = Caught(KeyError("k"), 3), Caught(KeyError("k"), 1), Caught(RuntimeError(reset), 0)
    first.time, late.time, lost.time = 1.0, 2.0, 0.5
    assert caught_verdict([lost, late, None, first]).startswith("failed on rank 1: KeyError")


def test_a_dropped_isend_on_fresh_ranks_is_drained_and_the_ranks_kept(capsys):
    """A wrong answer as the first thing fresh ranks run: 'receives from the right' posts an
    isend to the right, drops its request when the watch stops its irecv, and the checker's drain
    must meet that message. Gloo gave up such a send once its request was destroyed: the drain
    waited 3 s and the checker replaced the ranks (labkit.check.ring_watch.UNWAITED keeps the
    request). In file order the right answers ran first on the shared cluster and hid it."""
    answer = dict((w[0], w[1]) for w in ring.WRONG)["receives from the right (isend/irecv)"]
    with labkit.Cluster(4, backend="gloo", spares=0, timeout=120) as c:
        pids = c.run(os.getpid)
        ok, line, took = checker_line(capsys, "ring_all_reduce", answer, cluster=c, timeout=TIMEOUT)
        assert not ok and "receives from the left-hand neighbour" in line, line
        assert c.run(os.getpid) == pids, "the ranks were replaced: the drain did not meet the message"
        assert took < JUDGE_S, f"judged in {took:.2f} s"
