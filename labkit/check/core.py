"""What every checker shares: find the cluster, run the learner's code, word the verdict.

A checker is a function ``body(fn, cluster, ...) -> (ok, detail)`` wrapped by `@checker`,
which turns a stub's NotImplementedError into "not implemented yet", a failure on a rank into
"failed on rank r: ...", and a hang into "hung: ..." - always one line, never an exception.
"""
import functools

from labkit.runtime import cluster as _cluster
from labkit.runtime.errors import RankError, RankTimeout


def report(name: str, ok: bool, detail: str = "") -> bool:
    """Print the one deterministic line of a checker and return ok."""
    verdict = "pass" if ok else "FAIL"
    print(f"{name}: {verdict}" + (f" ({detail})" if detail else ""))
    return ok


def _not_implemented(exc: BaseException) -> bool:
    if isinstance(exc, NotImplementedError):
        return True
    if isinstance(exc, RankError) and exc.failures and not exc.stuck:
        return all(f.type == "NotImplementedError" for f in exc.failures.values())
    return False


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def describe_failure(exc: BaseException) -> str:
    """One line about a failure of the learner's code: which rank, what, where."""
    if isinstance(exc, RankTimeout):
        r, where = sorted(exc.stuck.items())[0]
        lines = where.splitlines()
        at = lines[-2].strip() if len(lines) >= 2 else ""
        return f"hung: rank {r} stuck {lines[0]}" + (f" at {at}" if at else "") + \
            " (a send without a recv, or a collective not every rank called?)"
    if isinstance(exc, RankError):
        r, f = sorted(exc.failures.items())[0]
        last = [ln.strip() for ln in f.traceback.splitlines() if ln.strip().startswith(("Cell", "<", "/"))]
        at = f" at {last[-1]}" if last else ""
        return f"failed on rank {r}: {f.type}: {_first_line(f.message)}{at}"
    return f"failed: {type(exc).__name__}: {_first_line(str(exc))}"


def get_cluster(cluster=None):
    c = cluster if cluster is not None else _cluster.current()
    if c is None:
        raise RuntimeError("this checker runs your code on the ranks: start a cluster first with "
                           "cluster = labkit.Cluster(world_size=4)")
    return c


def checker(name: str):
    """Decorate ``body(fn, cluster, *args, **kwargs) -> (ok, detail)`` into a checker."""
    def wrap(body):
        @functools.wraps(body)
        def run(fn, *args, cluster=None, **kwargs) -> bool:
            try:
                ok, detail = body(fn, get_cluster(cluster), *args, **kwargs)
            except Exception as exc:          # noqa: BLE001 - a checker never raises at the learner
                if _not_implemented(exc):
                    print(f"{name}: not implemented yet (replace the `raise NotImplementedError` "
                          "line with your code, then run this cell again)")
                    return False
                return report(name, False, describe_failure(exc))
            return report(name, ok, detail)
        return run
    return wrap


def run_exercise(fn, *args, cluster=None, timeout: float = 60, **kwargs) -> list:
    """Run the learner's fn on every rank (a thin cluster.run for checkers)."""
    return get_cluster(cluster).run(fn, *args, timeout=timeout, **kwargs)
