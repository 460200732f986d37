"""Checker for notebook 06 (tensor parallelism): the learner's row-parallel linear.

`row_parallel(Fn)`: Fn is a torch.autograd.Function with
    forward(ctx, x_shard, weight_shard, bias, group) -> y        (the whole output, every rank)
    backward(ctx, grad_y) -> (grad_x_shard, grad_weight_shard, grad_bias, None)
Rank r holds columns r of the weight and the matching slice of the input. It is run on every
rank against nn.Linear on one device; the verdict names the usual mistakes: the all-reduce in
the wrong direction (backward instead of forward), the bias added on every rank before the
sum, an average instead of a sum, a result too large or too small by a factor (named: t, 1/t),
a gradient all-reduced that belongs to this rank alone, and ranks that call different
collectives (named: what each rank called).

That last one would never reach gloo: during the learner's forward and backward every
`torch.distributed` collective is first announced through the store (`_Agreed`), and each rank
compares what the others are about to call at the same position. A difference is reported on
every rank instead of a hang or an aborted process. A collective imported by name
(`from torch.distributed import all_reduce`, under any alias) is announced too: the names in the
learner's forward's and backward's module that refer to a collective are swapped as well.
"""
import time

from labkit.check.core import checker
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import lang, tr, tr_join

__all__ = ["row_parallel"]

_IN, _OUT, _B, _S = 16, 6, 3, 5
_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                "gather", "scatter", "send", "recv", "isend", "irecv", "barrier")
_ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


class _Mismatch(Exception):
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


class _Agreed:
    """Inside `with _Agreed(token, "forward")`: each torch.distributed collective is compared
    across ranks before it runs; a difference raises _Mismatch on every rank. Leaving the block
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
        elif not issubclass(typ, _Mismatch):      # tell the others, then let it propagate
            try:
                self._agree(f"raised {typ.__name__}")
            except _Mismatch:
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
                raise _Mismatch(tr("rank {late} did not reach its {nth} collective of {phase} "
                                   "within {limit:.0f} s, where rank {rank} {what}",
                                   late=late[0], nth=_nth(self.i), phase=self.phase,
                                   limit=self.timeout, rank=rank, what=_shown(what, self.phase)))
            time.sleep(0.002)
        calls = [store.get(k).decode() for k in keys]
        if len(set(calls)) > 1:
            raise _Mismatch(_mismatch_text(calls, self.i, self.phase))


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


def _mismatch_text(calls: list, i: int, phase: str) -> str:
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


def _case(fn, token: str = "", timeout: float = 30):
    import torch
    import torch.distributed as dist
    t, r = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(7)
    w = torch.randn(_OUT, _IN, generator=g, dtype=torch.float64)
    bias = torch.randn(_OUT, generator=g, dtype=torch.float64) + 1.0
    x = torch.randn(_B, _S, _IN, generator=g, dtype=torch.float64)
    dy = torch.randn(_B, _S, _OUT, generator=g, dtype=torch.float64)
    k = _IN // t
    cols = slice(r * k, (r + 1) * k)
    xr, wr, br = (z.clone().requires_grad_() for z in (x, w, bias))
    torch.nn.functional.linear(xr, wr, br).backward(dy)
    xs, ws, bs = (z.clone().requires_grad_() for z in (x[..., cols], w[:, cols], bias))
    summed_gx = xr.grad[..., cols].clone()      # what an all-reduce of the input gradient gives
    dist.all_reduce(summed_gx)
    summed_gw = wr.grad[:, cols].clone()
    dist.all_reduce(summed_gw)
    out = {"ref_y": (x @ w.t() + bias), "summed_gx": summed_gx, "summed_gw": summed_gw, "partial": x[..., cols] @ w[:, cols].t(), "bias": bias,
           "ref_gx": xr.grad[..., cols], "ref_gw": wr.grad[:, cols], "ref_gb": br.grad, "t": t}
    try:
        with _Agreed(token, "forward", timeout, fn):
            y = fn.apply(xs, ws, bs, None)
    except _Mismatch as exc:
        return {**out, "error": str(exc)}
    if not isinstance(y, torch.Tensor):
        return {**out, "error": tr("forward returned {kind}, not a tensor", kind=type(y).__name__)}
    out["y"] = y.detach().clone()
    if tuple(y.shape) != tuple(out["ref_y"].shape):
        return {**out, "error": tr("forward returned shape {got}, expected {want} (batch, seq, "
                                   "out_features)", got=tuple(y.shape),
                                   want=tuple(out["ref_y"].shape))}
    try:
        with _Agreed(token, "backward", timeout, fn):
            y.backward(dy)
    except _Mismatch as exc:
        return {**out, "error": str(exc)}
    except RuntimeError as exc:
        msg = str(exc).strip().splitlines()[0]
        return {**out, "error": tr("backward failed: {msg} (return one gradient per input of "
                                   "forward, each shaped like that input: x shard, weight shard, "
                                   "bias, None)", msg=msg)}
    out.update(gx=xs.grad, gw=ws.grad, gb=bs.grad)
    return out


def _close(a, b) -> bool:
    return a is not None and tuple(a.shape) == tuple(b.shape) and bool((a - b).abs().max() < 1e-8)


def _scale(a, b):
    """c when a = c * b (c not 1, one number for the whole tensor), else None."""
    if a is None or tuple(a.shape) != tuple(b.shape) or not bool(b.abs().max() > 0):
        return None
    c = ((a * b).sum() / (b * b).sum()).item()
    return c if abs(c - 1) > 1e-6 and _close(a, c * b) else None


def _factor(c: float, t: int) -> str:
    """'4x the right one (4 = the number of ranks: ...)', '1/4 of the right one (...)'."""
    if abs(c - t) < 1e-6:
        return tr("{t}x the right one ({t} = the number of ranks: summed over the ranks once too "
                  "often, or multiplied by the world size)", t=t)
    if abs(c - 1 / t) < 1e-6:
        return tr("{c:.3g}x the right one (1/{t}, one over the number of ranks: divided by the "
                  "world size, or averaged where a sum is needed)", c=c, t=t)
    return tr("{c:.3g}x the right one", c=c)


def diagnose(res: dict, rank: int) -> str:
    """'' when the rank's results match one device, else the first mistake found."""
    if res.get("error"):
        return tr("rank {rank}: {error}", rank=rank, error=res["error"])
    t, y, ref, part, b = res["t"], res["y"], res["ref_y"], res["partial"], res["bias"]
    if not _close(y, ref):
        gx = res.get("gx")
        if _close(y, part + b) and gx is not None and _close(gx, res["summed_gx"]):
            return tr("rank {rank}: the all-reduce is in the wrong direction: forward returned "
                      "this rank's partial product, and backward summed the input gradient. A "
                      "row-parallel layer sums the partial outputs in forward (Megatron's g) and "
                      "needs no collective in backward", rank=rank)
        if _close(y, part + b) or _close(y, part):
            return tr("rank {rank}: forward returned this rank's partial product x_r W_r^T "
                      "without summing it over ranks: all-reduce it (dist.all_reduce) before "
                      "returning", rank=rank)
        if _close(y, ref + (t - 1) * b):
            return tr("rank {rank}: the bias is counted {t} times: it was added on every rank "
                      "before the all-reduce. Sum the partial products first, then add the bias "
                      "once", rank=rank, t=t)
        if _close(y, (ref - b) / t + b) or _close(y, ref / t):
            return tr("rank {rank}: the output is 1/{t} of the right one: the partial products "
                      "must be summed (ReduceOp.SUM), not averaged", rank=rank, t=t)
        if _close(y, ref - b):
            return tr("rank {rank}: the bias is missing from the output: add it once, after the "
                      "all-reduce", rank=rank)
        c, summed = _scale(y, ref), _scale(y - b, ref - b)
        if c or summed:
            what = tr("the output") if c else \
                tr("the summed product (before the bias, which is right)")
            return tr("rank {rank}: {what} is {factor}. Sum the partial products with one "
                      "all-reduce (ReduceOp.SUM), then add the bias once", rank=rank, what=what,
                      factor=_factor(c or summed, t))
        return tr("rank {rank}: forward differs from nn.Linear on one device by {gap:.3g}",
                  rank=rank, gap=(y - ref).abs().max().item())
    gx, gw, gb = res["gx"], res["gw"], res["gb"]
    if gx is None:
        return tr("rank {rank}: backward returned no gradient for the input shard (first return "
                  "value)", rank=rank)
    if not _close(gx, res["ref_gx"]):
        if _close(gx, res["summed_gx"]):
            return tr("rank {rank}: the input gradient was all-reduced in backward; in a "
                      "row-parallel layer rank r's input slice gets grad_y @ W_r alone (the sum "
                      "belongs to forward)", rank=rank)
        c = _scale(gx, res["ref_gx"])
        if c:
            return tr("rank {rank}: the input gradient is {factor}. Rank r's input slice gets "
                      "grad_y @ W_r as it is: no collective, no division", rank=rank,
                      factor=_factor(c, t))
        return tr("rank {rank}: input gradient differs by {gap:.3g} (expected grad_y @ "
                  "weight_shard)", rank=rank, gap=(gx - res["ref_gx"]).abs().max().item())
    if gw is None:
        return tr("rank {rank}: backward returned no gradient for the weight shard", rank=rank)
    if not _close(gw, res["ref_gw"]):
        if _close(gw, res["summed_gw"]):
            return tr("rank {rank}: the weight gradient was all-reduced; each rank's columns get "
                      "grad_y^T x_r from its own input slice, no collective", rank=rank)
        c = _scale(gw, res["ref_gw"])
        if c:
            return tr("rank {rank}: the weight gradient is {factor}. Each rank's columns get "
                      "grad_y^T x_r from its own input slice: no collective, no division",
                      rank=rank, factor=_factor(c, t))
        return tr("rank {rank}: weight gradient differs (shape {got}, expected {want}; grad_y^T "
                  "x_r summed over batch and sequence)", rank=rank, got=tuple(gw.shape),
                  want=tuple(res["ref_gw"].shape))
    if gb is None:
        return tr("rank {rank}: backward returned no gradient for the bias (grad_y summed over "
                  "batch and sequence)", rank=rank)
    if not _close(gb, res["ref_gb"]):
        c = _scale(gb, res["ref_gb"])
        ratio = _factor(c, t) if c else \
            tr("{c:.3g}x the right one", c=(gb.sum() / res["ref_gb"].sum()).item())
        return tr("rank {rank}: bias gradient is {ratio}; it is grad_y summed over batch and "
                  "sequence, whole on every rank (no division, no all-reduce)", rank=rank,
                  ratio=ratio)
    return ""


@checker("row_parallel")
def row_parallel(fn, cluster, timeout: float = HANG_LIMIT_S):
    if cluster.world_size < 2 or _IN % cluster.world_size:
        return False, tr("needs a cluster of 2 or 4 ranks, this one has {n}", n=cluster.world_size)
    import uuid
    results = cluster.run(_case, fn, uuid.uuid4().hex[:12], timeout / 2, timeout=timeout)
    for rank, res in enumerate(results):
        why = diagnose(res, rank)
        if why:
            return False, why
    return True, tr("{n} ranks: output and the gradients of input shard, weight shard and bias "
                    "equal nn.Linear on one device", n=cluster.world_size)
