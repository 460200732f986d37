"""Calling the learner's function on the ranks without letting one rank's mistake cost the others.

Runs inside a rank. `attempt` calls the learner's function and catches what it raises; `settle`
then makes every rank tell the others, through the process group's key-value store (not a
collective, so it cannot meet the learner's own half-finished collectives), whether it got
through. Two things follow:

- When every rank raises (a stub's NotImplementedError, or one bug on every rank), every rank
  returns normally with what it caught: the checker answers at once and the ranks are kept.
  Without this, the first rank to raise ends the run and ranks still busy elsewhere (computing
  the checker's reference) would be taken for stuck and replaced.
- When only some ranks raise, the others are usually waiting for them inside a collective and
  never come back. The ranks that raised wait `patience` seconds for them, then raise what
  they caught (the runtime stops the stuck ranks and reports both), so even that is quick.

A rank that did not raise also waits at most `patience` seconds for the others after its own
call returned; then it raises `PeersStuck`, and the checker reports where the others wait.
"""
import datetime
import time
import traceback

PATIENCE_S = 5.0        # seconds a rank waits for the others once its own call is over


class PeersStuck(RuntimeError):
    """This rank's call returned but some others' did not (they wait for a message or a
    collective that will not come)."""


class Caught:
    """What the learner's function raised on one rank: picklable, with the learner's frames."""

    def __init__(self, exc: BaseException, rank: int):
        self.type = type(exc).__name__
        self.message = str(exc).strip()
        self.rank = rank
        self.time = time.time()
        self.stub = isinstance(exc, NotImplementedError)
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [f for f in frames if "/labkit/" not in f.filename.replace("\\", "/")
                and "/torch/" not in f.filename.replace("\\", "/")]
        # the learner's innermost frame, put into words in the notebook (describe), where a
        # cell's file name can be turned into "Cell In[7]"
        self.frame = (mine[-1].filename, mine[-1].lineno, (mine[-1].line or "").strip()) if mine else None
        self.hint = ""                  # a sentence the checker adds when it knows the cause
        self.exception = exc            # dropped when pickled (see __getstate__)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["exception"] = None
        return state

    @property
    def first_line(self) -> str:
        return self.message.splitlines()[0] if self.message else ""

    def describe(self) -> str:
        at = ""
        if self.frame:
            from labkit.runtime.errors import where
            at = f" at {where(self.frame[0], self.frame[1])}" + (f": {self.frame[2]}" if self.frame[2] else "")
        hint = f" - {self.hint}" if self.hint else ""
        return f"failed on rank {self.rank}: {self.type}: {self.first_line}{at}{hint}"


def attempt(fn, *args, **kwargs):
    """(value, None), or (None, Caught) when fn raised an Exception."""
    import labkit
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:            # noqa: BLE001 - every rank must reach settle()
        return None, Caught(exc, labkit.rank())


def _store():
    import torch.distributed as dist
    # torch keeps the store the process group was made with; there is no public getter.
    return dist.distributed_c10d._get_default_store()


def settle(token: str, key: str, flag=None, patience: float = PATIENCE_S) -> list:
    """Tell every rank whether this one's call raised or went wrong (`flag`: a Caught, a
    problem, or None when all is well); return each rank's answer (True = flagged), by rank.
    If some rank does not arrive within `patience` s: raise what this rank caught, or
    PeersStuck. `token` is unique to one checker call, `key` to one call of the learner's fn."""
    import torch.distributed as dist
    rank, n = dist.get_rank(), dist.get_world_size()
    store = _store()
    keys = [f"labkit-check/{token}/{key}/{r}" for r in range(n)]
    store.set(keys[rank], "1" if flag is not None else "0")
    try:
        store.wait(keys, datetime.timedelta(seconds=patience))
    except Exception:                   # noqa: BLE001 - a store timeout: someone is stuck
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        if getattr(flag, "exception", None) is not None:
            import labkit
            labkit.emit(learner_raised=flag)        # so the checker can still say what it was
            raise flag.exception
        raise PeersStuck(f"rank {rank} finished its call, rank{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing))} did not within {patience:g} s") from None
    return [store.get(k) == b"1" for k in keys]
