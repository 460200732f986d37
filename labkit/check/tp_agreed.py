"""What notebook 06's checker (labkit.check.tp) puts around the learner's forward and backward:
every `torch.distributed` collective is announced through the store before it runs (`Agreed`),
and each rank compares what the others are about to call at the same position; a difference
raises `Mismatch` on every rank, with a sentence naming what each rank called, instead of a hang
or a process aborted by gloo. A collective imported by name (`from torch.distributed import
all_reduce`, under any alias) is announced too: the names in the learner's forward's and
backward's module that refer to a collective are swapped as well.
"""
import time

from labkit.i18n import lang, tr, tr_join

_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                "gather", "scatter", "send", "recv", "isend", "irecv", "barrier")
_ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


class Mismatch(Exception):
    """Ranks were about to call different collectives (found through the store)."""


def _call_text(name, args, kwargs) -> str:
    """'all_reduce((3, 5, 6) float64, op=SUM)': the collective and what it would exchange."""
    import torch
    flat = [a for x in (*args, *kwargs.values()) for a in (x if isinstance(x, (list, tuple)) else [x])]
    t = next((a for a in flat if isinstance(a, torch.Tensor)), None)
    parts = [f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}"] if t is not None else []
    op = kwargs.get("op", args[1] if name == "all_reduce" and len(args) > 1 else None)
    if op is not None:
        parts.append(f"op={getattr(op, 'name', op)}")
    return f"{name}({', '.join(parts)})"


class Agreed:
    """Inside `with Agreed(token, "forward")`: each torch.distributed collective is compared
    across ranks before it runs; a difference raises Mismatch on every rank. Leaving the block
    counts as one more position ("returned from forward", or "raised ValueError"), so a rank
    that makes fewer calls than the others is named too."""

    def __init__(self, token: str, phase: str, timeout: float, fn=None):
        self.token, self.phase, self.timeout, self.i = token, phase, timeout, 0
        self.scopes = _scopes(fn)

    def __enter__(self):
        import torch.distributed as dist
        self.saved = {n: getattr(dist, n) for n in _COLLECTIVES if hasattr(dist, n)}
        wrapped = {id(real): self._wrap(name, real) for name, real in self.saved.items()}
        for name, real in self.saved.items():
            setattr(dist, name, wrapped[id(real)])
        self.swapped = []       # (globals, name, real): collectives the learner imported by name
        for scope in self.scopes:
            for key, value in list(scope.items()):
                if id(value) in wrapped and any(value is r for r in self.saved.values()):
                    self.swapped.append((scope, key, value))
                    scope[key] = wrapped[id(value)]
        return self

    def _wrap(self, name, real):
        def call(*args, **kwargs):
            self._agree(_call_text(name, args, kwargs))
            return real(*args, **kwargs)
        return call

    def __exit__(self, typ, exc, tb):
        import torch.distributed as dist
        for name, real in self.saved.items():
            setattr(dist, name, real)
        for scope, key, real in self.swapped:
            scope[key] = real
        if typ is None:
            self._agree(f"returned from {self.phase}")
        elif not issubclass(typ, Mismatch):      # tell the others, then let it propagate
            try:
                self._agree(f"raised {typ.__name__}")
            except Mismatch:
                pass
        return False

    def _agree(self, what: str) -> None:
        import torch.distributed as dist
        from labkit.check.guard import _store
        store, rank, n = _store(), dist.get_rank(), dist.get_world_size()
        keys = [f"labkit-check/{self.token}/{self.phase}/{self.i}/{r}" for r in range(n)]
        self.i += 1
        store.set(keys[rank], what)
        deadline = time.monotonic() + self.timeout
        while not store.check(keys):     # poll: store.wait's timeout prints C++ warnings
            if time.monotonic() > deadline:
                late = [r for r, k in enumerate(keys) if not store.check([k])]
                raise Mismatch(tr("rank {late} did not reach its {nth} collective of {phase} "
                                   "within {limit:.0f} s, where rank {rank} {what}",
                                   late=late[0], nth=_nth(self.i), phase=self.phase,
                                   limit=self.timeout, rank=rank, what=_shown(what, self.phase)))
            time.sleep(0.002)
        calls = [store.get(k).decode() for k in keys]
        if len(set(calls)) > 1:
            raise Mismatch(mismatch_text(calls, self.i, self.phase))


def _scopes(fn) -> list:
    """The module namespaces (globals) of fn's forward and backward, each once."""
    out = []
    for name in ("forward", "backward"):
        g = getattr(getattr(fn, name, None), "__globals__", None)
        if isinstance(g, dict) and not any(g is o for o in out):
            out.append(g)
    return out


def _nth(i: int) -> str:
    """'1st', '2nd' ... in English; the bare number where the catalog writes 第 {nth} 个."""
    return _ORDINAL.get(i, f"{i}th") if lang() == "en" else str(i)


def _shown(call: str, phase: str) -> str:
    """A position as the learner reads it: the ranks compare the English text (the same on every
    rank), the message shows it in the learner's language."""
    if call == f"returned from {phase}":
        return tr("returned from {phase}", phase=phase)
    if call.startswith("raised "):
        return tr("raised {error}", error=call[len("raised "):])
    return tr("called {call}", call=call)


def mismatch_text(calls: list, i: int, phase: str) -> str:
    by_call = {}
    for r, c in enumerate(calls):
        by_call.setdefault(c, []).append(r)
    said = [(tr("ranks {ranks} {what}", ranks=", ".join(map(str, rs)), what=_shown(c, phase))
             if len(rs) > 1 else tr("rank {ranks} {what}", ranks=rs[0], what=_shown(c, phase)))
            for c, rs in by_call.items()]
    return tr("the ranks disagree at the {nth} collective of {phase}: {said}. Every rank must call "
              "the same collectives in the same order with the same shapes (gloo hangs or aborts "
              "the process otherwise): no collective under `if rank == ...`", nth=_nth(i),
              phase=phase, said=tr_join(said, "; "))
