"""Checker for notebook 07 (pipeline parallelism).

- `schedule_1f1b(fn)`: the learner's fn(stage, stages, microbatches) returns one stage's 1F1B
  action list (warm-up forwards, then one forward one backward, then the cool-down backwards).
  Judged without processes first, on several shapes (the validator names the first deadlock or
  missing dependency; the simulator checks it is 1F1B: at most p - r micro-batches alive on
  stage r and the (p-1)/(m+p-1) bubble), then run on the cluster, gradients against one process.
  An answer that calls labkit's own `one_f_one_b` (directly, through `build` or `SCHEDULES`) is
  turned down: it is the answer being checked. The learner's function runs in the notebook's
  process here, under the ranks' limit (`guard.time_limit`): an endless loop is reported as a hang.
"""
import sys

from labkit.check.core import checker
from labkit.check.guard import HANG_LIMIT_S, time_limit
from labkit.i18n import tr

__all__ = ["schedule_1f1b", "judge_1f1b"]

SHAPES = [(4, 8), (4, 2), (2, 5), (3, 3)]        # (stages, micro-batches): m > p, m < p, m = p


class _Borrowed(Exception):
    """The learner's function called labkit's own one_f_one_b."""


def _call(fn, *args):
    """fn(*args), watching (sys.setprofile) for a call to labkit's one_f_one_b at any depth."""
    from labkit.pipeline import schedules
    target, seen = schedules.one_f_one_b.__code__, []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code is target:
            seen.append(frame.f_code)
    before = sys.getprofile()
    sys.setprofile(watch)
    try:
        got = fn(*args)
    finally:
        sys.setprofile(before)
    if seen:
        raise _Borrowed
    return got


def _lists(fn, p, m) -> list:
    from labkit.pipeline.validate import _parse
    acts = []
    for r in range(p):
        got = _call(fn, r, p, m)
        if not isinstance(got, (list, tuple)):
            raise ValueError(tr("for stage {r} of {p} (m={m}) your function returned {kind}; "
                                "return a list of actions such as [F(0), F(1), B(0), ...]",
                                r=r, p=p, m=m, kind=type(got).__name__))
        acts.append([_parse(a) for a in got])
    return acts


def judge_1f1b(fn, shapes=SHAPES):
    """(ok, detail) without processes: valid, and 1F1B's memory and bubble, on every shape."""
    from labkit.pipeline import ScheduleError, as_schedule, bubble_ratio, simulate, validate
    for p, m in shapes:
        try:
            acts = _lists(fn, p, m)
        except (ScheduleError, ValueError) as exc:
            return False, tr("p={p}, m={m}: {problem}", p=p, m=m, problem=exc)
        except _Borrowed:
            return False, tr("your function calls labkit's own one_f_one_b (directly or through build), "
                             "which is the answer being checked: please write the schedule yourself, "
                             "from the three phases (warm-up, steady state, cool-down)")
        s = as_schedule(acts, p, m, name="your 1F1B")
        problems = validate(s)
        if problems:
            return False, tr("p={p}, m={m}: {problem}", p=p, m=m, problem=problems[0])
        t = simulate(s, forward=1, backward=1, weight=1)
        for r, peak in enumerate(t.peak_activations):
            if peak > min(p - r, m):
                return False, tr("p={p}, m={m}: it runs, but stage {r} keeps {peak} micro-batches of "
                                 "activations alive at once; 1F1B keeps at most p - r = {most} "
                                 "(stage r does p - 1 - r warm-up forwards, then alternates F and B)",
                                 p=p, m=m, r=r, peak=peak, most=min(p - r, m))
        want = bubble_ratio(p, m)
        if t.bubble > want + 1e-9:
            return False, tr("p={p}, m={m}: it runs, but its simulated bubble is {got:.1%}, "
                             "1F1B's is (p-1)/(m+p-1) = {want:.1%}: some stage waits longer than it must",
                             p=p, m=m, got=t.bubble, want=want)
    return True, tr("valid with 1F1B's bubble and memory on {n} shapes", n=len(shapes))


@checker("schedule_1f1b")
def schedule_1f1b(fn, cluster, microbatches: int = 8, timeout: float = HANG_LIMIT_S):
    """fn(stage, stages, microbatches) -> that stage's 1F1B actions. Judged on several shapes
    without processes, then run on the cluster's ranks with gradients checked."""
    from labkit.pipeline import as_schedule
    from labkit.pipeline.executor import run_schedule
    p = cluster.world_size
    with time_limit(timeout):           # fn runs here, in the notebook: the ranks' limit for it too
        ok, detail = judge_1f1b(fn)
        if not ok:
            return ok, detail
        acts = _lists(fn, p, microbatches)
    s = as_schedule(acts, p, microbatches, name="your 1F1B")
    res = cluster.run(run_schedule, s, live=False, warmup=0, timeout=timeout)
    diff = max(r["grad_diff"] for r in res)
    missing = [n for r in res for n in r["grad_mismatch"]]
    from labkit.pipeline.formulas import grad_tolerance   # derived: chain_bound, run_schedule's defaults
    if missing or not diff <= grad_tolerance(microbatches):
        return False, tr("ran on {p} ranks but the gradients differ from one process's "
                         "(max |diff| {diff:.3g}, missing or extra: {missing})",
                         p=p, diff=diff, missing=missing[:3])
    return True, tr("{judged}; ran on {p} ranks with m={m}, gradients equal one process's",
                    judged=detail, p=p, m=microbatches)
