"""The 1F1B exercise checker against a corpus of plausible wrong answers and right ones."""
import time

import pytest

from labkit.check.pipeline import judge_1f1b, schedule_1f1b
from labkit.pipeline import B, F, build, one_f_one_b


def right(r, p, m):
    warm = min(p - 1 - r, m)
    a = [F(i) for i in range(warm)]                 # warm-up
    for i in range(m - warm):                       # steady state
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]   # cool-down


def right_strings(r, p, m):
    return [repr(a) for a in right(r, p, m)]


def right_counters(r, p, m):
    out, f, b = [], 0, 0
    while f < min(p - 1 - r, m):
        out.append(F(f))
        f += 1
    while f < m:
        out += [F(f), B(b)]
        f, b = f + 1, b + 1
    return out + [B(i) for i in range(b, m)]


def no_warmup(r, p, m):
    return [x for i in range(m) for x in (F(i), B(i))]


def warmup_reversed(r, p, m):
    warm = min(r, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]


def no_cooldown(r, p, m):
    return right(r, p, m)[:2 * m - min(p - 1 - r, m)]


def backward_first(r, p, m):
    warm = min(p - 1 - r, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [B(i), F(warm + i)]
    return a + [B(i) for i in range(m - warm, m)]


def gpipe_order(r, p, m):
    return [F(i) for i in range(m)] + [B(i) for i in range(m)]


def one_warmup_too_many(r, p, m):
    warm = min(p - r, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]


def steady_restarts_forwards(r, p, m):
    warm = min(p - 1 - r, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]


def cooldown_off_by_one(r, p, m):
    warm = min(p - 1 - r, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm + 1, m + 1)]


def warmup_without_min(r, p, m):
    warm = p - 1 - r
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(max(m - warm, 0), m)]


def all_stages_at_once(r, p, m):
    return [right(s, p, m) for s in range(p)]


def returns_nothing(r, p, m):
    warm = min(p - 1 - r, m)
    [F(i) for i in range(warm)]


def same_warmup_everywhere(r, p, m):
    warm = min(p - 1, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]


def calls_labkit(r, p, m):
    return one_f_one_b(p, m).actions[r]


def calls_labkit_through_build(r, p, m):
    return list(build("1f1b", p, m).actions[r])


def copies_labkit_as_strings(r, p, m):
    from labkit.pipeline import schedules
    return [repr(a) for a in schedules.SCHEDULES["1f1b"](p, m).actions[r]]


def warmup_walks_the_wrong_way(r, p, m):
    """Counts the warm-up from the last stage down, but steps up: never ends (issue 33)."""
    warm, s = 0, p - 1
    while s != r:
        s += 1
        warm += 1
    return right(r, p, m)


def warmup_from_microbatches(r, p, m):
    warm = min(m - 1 - r, m)
    a = [F(i) for i in range(max(warm, 0))]
    for i in range(m - max(warm, 0)):
        a += [F(max(warm, 0) + i), B(i)]
    return a + [B(i) for i in range(m - max(warm, 0), m)]


def backwards_in_reverse(r, p, m):
    acts = right(r, p, m)
    warm = min(p - 1 - r, m)
    cool = [B(i) for i in reversed(range(m - warm, m))]
    return acts[:len(acts) - warm] + cool


def steady_two_forwards(r, p, m):
    warm = min(p - 1 - r, m)
    a, f, b = [F(i) for i in range(warm)], warm, 0
    while f < m:
        a += [F(f)] + ([F(f + 1)] if f + 1 < m else []) + [B(b)]
        f, b = f + 2, b + 1
    return a + [B(i) for i in range(b, m)]


def warmup_counts_stages_left(r, p, m):
    warm = min(p - r, m) - 1 if r else min(p - 1, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]


def last_stage_warms_up(r, p, m):
    warm = min(max(p - 1 - r, 1), m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i), B(i)]
    return a + [B(i) for i in range(m - warm, m)]


def one_backward_missing(r, p, m):
    return right(r, p, m)[:-1]


def forwards_as_ints(r, p, m):
    return [i for i in range(m)]


def eight_written_in(r, p, m):
    return right(r, p, 8)


def duplicate_backward(r, p, m):
    return right(r, p, m) + [B(m - 1)]


def warmup_out_of_order(r, p, m):
    acts = right(r, p, m)
    if p - 1 - r >= 2:
        acts[0], acts[1] = acts[1], acts[0]
    return acts


def steady_backward_lags_two(r, p, m):
    warm = min(p - 1 - r, m)
    a = [F(i) for i in range(warm)]
    for i in range(m - warm):
        a += [F(warm + i)] + ([B(i - 1)] if i >= 1 else [])
    return a + [B(i) for i in range(max(m - warm - 1, 0), m)]


BORROWED = "which is the answer being checked: please write the schedule yourself"

WRONG = [
    (calls_labkit, "your function calls labkit's own one_f_one_b (directly or through build), " + BORROWED),
    (calls_labkit_through_build, BORROWED),
    (copies_labkit_as_strings, BORROWED),
    (no_warmup, "it runs, but its simulated bubble is 75.0%, 1F1B's is (p-1)/(m+p-1) = 27.3%"),
    (warmup_reversed, "deadlock"),
    (no_cooldown, "stage 0 never runs B5"),
    (backward_first, "stage 3 runs B0 (step 0) before F0 (step 1)"),
    (gpipe_order, "stage 0 keeps 8 micro-batches of activations alive at once; 1F1B keeps at most p - r = 4"),
    (one_warmup_too_many, "stage 0 keeps 5 micro-batches"),
    (steady_restarts_forwards, "stage 0 runs F0 (forward of micro-batch 0) twice"),
    (cooldown_off_by_one, "out of range"),
    (warmup_without_min, "p=4, m=2: stage 0, step 2: F2 is out of range"),
    (all_stages_at_once, "is not an action"),
    (returns_nothing, "returned NoneType"),
    (same_warmup_everywhere, "stage 1 keeps 4 micro-batches"),
    (warmup_from_microbatches, "p=4, m=8: "),
    (backwards_in_reverse, "p=4, m=8: "),
    (steady_two_forwards, "p=4, m=8: "),
    (last_stage_warms_up, "p=4, m=8: "),
    (one_backward_missing, "never runs B7"),
    (forwards_as_ints, "is not an action"),
    (eight_written_in, "p=4, m=2: stage 0, step 2: F2 is out of range"),
    (duplicate_backward, "stage 0 runs B7 (backward of micro-batch 7) twice"),
    (warmup_out_of_order, "its simulated bubble is 29.4%"),
    (steady_backward_lags_two, "stage 0 keeps 5 micro-batches of activations alive at once"),
]


@pytest.mark.parametrize("fn,expect", WRONG, ids=[f.__name__ for f, _ in WRONG])
def test_wrong_answers_get_their_diagnosis(fn, expect):
    t = time.perf_counter()
    ok, detail = judge_1f1b(fn)
    assert not ok
    assert expect in detail, detail
    assert time.perf_counter() - t < 3


@pytest.mark.parametrize("fn", [right, right_strings, right_counters])
def test_right_answers_pass(fn):
    assert judge_1f1b(fn) == (True, "valid with 1F1B's bubble and memory on 4 shapes")


def test_an_endless_loop_is_reported_after_the_limit(capsys):
    """The checker runs the learner's function in the notebook's process: an endless loop must
    come back as a hang after the same limit as on the ranks (here 2 s instead of 10), naming
    the learner's line, and leave the process usable (the alarm taken back)."""
    import signal
    import types
    import labkit.pipeline.executor  # noqa: F401 - imported (torch) before the clock starts
    handler, (left, _) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    t = time.perf_counter()
    assert not schedule_1f1b(warmup_walks_the_wrong_way, cluster=types.SimpleNamespace(world_size=4), timeout=2)
    took = time.perf_counter() - t
    line = capsys.readouterr().out.strip()
    assert line.startswith("schedule_1f1b: FAIL (hung: your function had not returned after 2 s at "), line
    assert "test_pipeline_check.py, line" in line and "while s != r" in line, line
    assert 2 <= took < 4, took
    assert signal.getsignal(signal.SIGALRM) is handler          # another alarm (a test timeout) kept
    now = signal.getitimer(signal.ITIMER_REAL)[0]
    assert (now == 0.0) if left == 0.0 else abs(now - (left - took)) < 0.5, (left, took, now)


@pytest.mark.cluster
def test_checker_on_the_cluster(cluster4, capsys):
    assert schedule_1f1b(right, cluster=cluster4)
    assert not schedule_1f1b(no_warmup, cluster=cluster4)

    def stub(r, p, m):
        raise NotImplementedError("exercise")
    assert not schedule_1f1b(stub, cluster=cluster4)
    assert not schedule_1f1b(calls_labkit, cluster=cluster4)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("schedule_1f1b: pass (valid with 1F1B's bubble and memory on 4 shapes; ran on 4 "
                             "ranks with m=8, gradients equal one process's)"), out
    assert out[1].startswith("schedule_1f1b: FAIL (p=4, m=8: it runs, but its simulated bubble is 75.0%"), out
    assert out[2].startswith("schedule_1f1b: not implemented yet"), out
    assert out[3].startswith("schedule_1f1b: FAIL (your function calls labkit's own one_f_one_b"), out
    assert "please write the schedule yourself" in out[3], out
    assert cluster4.run(lambda: 1) == [1] * 4          # the cluster is still usable


def test_time_limit_off_the_main_thread_uses_a_trace_function():
    """Where SIGALRM cannot be used (a kernel running cells off the main thread), the limit
    still holds: a trace function checks the clock on every line, and is taken back after."""
    import sys
    import threading
    from labkit.check.guard import OutOfTime, time_limit
    seen = {}

    def body():
        t = time.perf_counter()
        try:
            with time_limit(0.5):
                warmup_walks_the_wrong_way(0, 4, 8)
        except OutOfTime as exc:
            seen["line"], seen["took"] = exc.describe(), time.perf_counter() - t
        seen["trace"] = sys.gettrace()
    th = threading.Thread(target=body)
    th.start()
    th.join(10)
    assert "hung: your function had not returned after 0.5 s at " in seen["line"], seen
    assert any(ln in seen["line"] for ln in ("while s != r", "s += 1", "warm += 1")), seen   # the loop's line
    assert 0.5 <= seen["took"] < 2 and seen["trace"] is None
