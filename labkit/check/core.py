"""What every checker shares: find the cluster, run the learner's code, word the verdict.

A checker is a function ``body(fn, cluster, ...) -> (ok, detail)`` wrapped by `@checker`,
which turns a stub's NotImplementedError into "not implemented yet", a failure on a rank into
"failed on rank r: ..." (the rank that failed first, not one that only lost its peer), and a
hang into "hung: ..." - always one line, never an exception. Rank-side helpers that keep the
ranks alive through the learner's mistakes are in `guard.py`.
"""
import functools

from labkit.runtime import cluster as _cluster
from labkit.runtime.errors import RankError, RankTimeout
from labkit.check.guard import OutOfTime
from labkit.check.ring_diagnosis import stuck_in
from labkit.i18n import tr, tr_join, trn
from labkit.verdict import FAIL, graded


def not_implemented_line(name: str) -> str:
    """"name: not implemented yet (what to do)": the first words stay English in every language
    (tests and graders read them), what to do is in the learner's language."""
    return tr("{name}: not implemented yet (replace the `raise NotImplementedError` line with your "
              "code, then run this cell again)", name=name)


def report(name: str, ok: bool, detail: str = "") -> bool:
    """Print the one deterministic line of a checker and return ok ("name: FAIL (...)" is what
    fails a notebook cell under pytest, see `labkit.verdict`). The name and the verdict word
    stay English in every language; the detail is in the learner's language (labkit.i18n)."""
    verdict = "pass" if ok else FAIL
    line = f"{name}: {verdict}" + (f" ({detail})" if detail else "")
    print(line)
    graded(name, ok, line)            # under nbgrader only: WrongAnswer, which the test cell counts
    return ok


def not_implemented(name: str) -> bool:
    """Print "name: not implemented yet (...)"; under nbgrader a stub loses the cell's points."""
    line = not_implemented_line(name)
    print(line)
    graded(name, False, line)
    return False


def _not_implemented(exc: BaseException) -> bool:
    if isinstance(exc, NotImplementedError):
        return True
    if isinstance(exc, RankError) and exc.failures and not exc.stuck:
        return all(f.type == "NotImplementedError" for f in exc.failures.values())
    return False


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
              "Connection refused", "communicator was aborted", "remote process exited")


def lost_a_peer(message: str) -> bool:
    """An error a rank only sees because another rank died or left (not its own fault)."""
    return any(s in message for s in _PEER_LOST)


def first_failure(failures: dict):
    """(rank, Failure) that started it: a rank that died, else one whose error is its own
    (not "Connection reset by peer", which only says that another rank went first), else the
    lowest rank."""
    order = sorted(failures.items(), key=lambda kv: (kv[1].type != "RankDied",
                                                      lost_a_peer(kv[1].message), kv[0]))
    return order[0]


def _learner_frame(where: str) -> str:
    """The innermost frame of a stuck rank's stack that is not labkit's or torch's."""
    frames = [ln.strip() for ln in where.splitlines()[1:] if ln.startswith("  ") and not ln.startswith("    ")]
    mine = [f for f in frames if not f.startswith("torch/") and "labkit/" not in f]
    if not mine and frames and "labkit/" in frames[0]:
        return "labkit/" + frames[0].split("labkit/", 1)[1]     # inside labkit's code: short path
    return (mine or frames or [""])[0]


def describe_hang(stuck: dict, returned=()) -> str:
    """'hung: rank r stuck in recv() at Cell In[5], line 7 ...' for the first stuck rank."""
    r, where = sorted(stuck.items())[0]
    at, where = _learner_frame(where), stuck_in(where)
    if returned:
        ranks = trn("rank {ranks}", "ranks {ranks}", len(returned), ranks=tr_join(map(str, returned)))
        if at:
            return tr("hung: rank {rank} stuck {where} at {at}, while {ranks} had returned from your "
                      "function (every rank must make the same collective calls, in the same order)",
                      rank=r, where=where, at=at, ranks=ranks)
        return tr("hung: rank {rank} stuck {where}, while {ranks} had returned from your function "
                  "(every rank must make the same collective calls, in the same order)",
                  rank=r, where=where, ranks=ranks)
    if at:
        return tr("hung: rank {rank} stuck {where} at {at} (a send without a recv, or a collective "
                  "not every rank called?)", rank=r, where=where, at=at)
    return tr("hung: rank {rank} stuck {where} (a send without a recv, or a collective not every "
              "rank called?)", rank=r, where=where)


def describe_failure(exc: BaseException) -> str:
    """One line about a failure of the learner's code: which rank, what, where."""
    if isinstance(exc, RankTimeout):
        returned = sorted(r for r, where in exc.stuck.items() if "in settle()" in where)
        inside = {r: where for r, where in exc.stuck.items() if r not in returned}
        return describe_hang(inside or exc.stuck, returned if inside else ())
    if isinstance(exc, RankError):
        r, f = first_failure(exc.failures)
        last = [ln.strip() for ln in f.traceback.splitlines() if ln.strip().startswith(("Cell", "<", "/"))]
        error = f"{f.type}: {_first_line(f.message)}"
        if last:
            return tr("failed on rank {rank}: {error} at {at}", rank=r, error=error, at=last[-1])
        return tr("failed on rank {rank}: {error}", rank=r, error=error)
    return tr("failed: {error}", error=f"{type(exc).__name__}: {_first_line(str(exc))}")


def caught_verdict(caught: list) -> str:
    """The detail line when the learner's function raised on some ranks (guard.Caught by
    rank, None where it did not): the rank that failed first (the lowest of those that raised
    the same error). Raises NotImplementedError for a stub, so the checker says "not
    implemented yet"."""
    raised = [c for c in caught if c is not None]
    if any(c.stub for c in raised):
        raise NotImplementedError
    first = min(raised, key=lambda c: (lost_a_peer(c.message), c.time))
    # the same error (the same type at the same line, or the same message) on several ranks:
    # name the lowest, so the line does not change run to run
    def same(c):
        return c.type == first.type and (c.first_line == first.first_line or
                                         (c.frame is not None and c.frame == first.frame))
    first = min((c for c in raised if same(c)), key=lambda c: c.rank)
    return first.describe()


def ranks_verdict(results: list):
    """(False, line) when the learner's function raised on some rank ("raised") or some rank
    found a problem ("problem"), the lowest rank's problem named; None when every rank was fine.
    For checkers whose ranks each return such a dict."""
    if any(res.get("raised") for res in results):
        return False, caught_verdict([res.get("raised") for res in results])
    problems = [res["problem"] for res in results if res.get("problem")]
    return (False, problems[0]) if problems else None


def new_token(timeout: float) -> tuple:
    """(a name unique to one checker call, for the keys its ranks leave in the store; how long
    a rank waits for the others at guard.settle: at most half the checker's timeout)."""
    import uuid
    from labkit.check.guard import PATIENCE_S
    return uuid.uuid4().hex[:12], min(PATIENCE_S, timeout / 2)


def get_cluster(cluster=None):
    c = cluster if cluster is not None else _cluster.current()
    if c is None:
        raise RuntimeError(tr("this checker runs your code on the ranks: start a cluster first with "
                              "cluster = labkit.Cluster(world_size=4)"))
    return c


def checker(name: str):
    """Decorate ``body(fn, cluster, *args, **kwargs) -> (ok, detail)`` into a checker."""
    def wrap(body):
        @functools.wraps(body)
        def run(fn, *args, cluster=None, **kwargs) -> bool:
            try:
                ok, detail = body(fn, get_cluster(cluster), *args, **kwargs)
            except OutOfTime as exc:          # the learner's code, run in this process, never returned
                return report(name, False, exc.describe())
            except Exception as exc:          # noqa: BLE001 - a checker never raises at the learner
                ran_on = cluster if cluster is not None else _cluster.current()
                raised = [e.data for e in getattr(ran_on, "events", None) or []
                          if "learner_raised" in e.data]
                if raised and not _not_implemented(exc):   # raised on some ranks, others stuck
                    return report(name, False, caught_verdict([d["learner_raised"] for d in raised]))
                if _not_implemented(exc):
                    return not_implemented(name)
                return report(name, False, describe_failure(exc))
            return report(name, ok, detail)
        return run
    return wrap


def run_exercise(fn, *args, cluster=None, timeout: float = None, **kwargs) -> list:
    """Run the learner's fn on every rank (a thin cluster.run for checkers); a hang is reported
    after guard.HANG_LIMIT_S unless `timeout` says otherwise."""
    from labkit.check.guard import HANG_LIMIT_S
    return get_cluster(cluster).run(fn, *args, timeout=HANG_LIMIT_S if timeout is None else timeout, **kwargs)
