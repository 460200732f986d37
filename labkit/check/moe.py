"""Checker for notebook 13 (expert parallelism): the learner's dispatch and combine.

`ep_dispatch(fn)`: fn(xs, expert, gate, experts, group=None) -> out, on every rank, where
    xs (M, h)      this rank's token copies, sorted by expert
    expert (M,)    their expert (global index 0 .. E-1; rank r holds r E/n .. (r+1) E/n - 1)
    gate (M,)      their gate
    experts        this rank's E/n experts (an nn.ModuleList)
    out (M, h)     gate x expert(row) for every row, in the order of xs
It is run with E = 2 n experts, uneven and skewed rows per rank, against the experts applied on
one process; gradients of xs and of each expert's weights are compared too. The verdict names
the usual mistakes: split sizes not exchanged (every all-to-all's splits are compared across
ranks through the store before it runs, so a mismatch is a verdict, not gloo aborting a
process), rows in the wrong order (the regrouping not undone), rows through the wrong expert
(expert e lives on rank e // (E/n)), gates applied twice or not at all, no gradient (torch's
all_to_all_single does not differentiate: labkit.moe.all_to_all does), and a hang.
"""
import json
import time

from labkit.check.core import checker, new_token, ranks_verdict
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr

__all__ = ["ep_dispatch"]

_H, _F = 6, 8


class _Stop(Exception):
    """The ranks disagree on an all-to-all's splits, or another rank already gave up."""


class _Splits:
    """Inside the block every dist.all_to_all_single first shows its splits to the other ranks
    (the store), so rows sent and rows expected can be compared before gloo sees them."""

    def __init__(self, token, patience):
        self.token, self.patience, self.i = token, patience, 0

    def __enter__(self):
        import torch.distributed as dist
        self.real = dist.all_to_all_single
        dist.all_to_all_single = self._call
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist
        dist.all_to_all_single = self.real
        return False

    def _call(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None, **kw):
        import torch.distributed as dist
        from labkit.check.guard import _store
        n, rank = dist.get_world_size(group), dist.get_rank(group)
        outs = list(output_split_sizes or [output.shape[0] // n] * n)
        ins = list(input_split_sizes or [input.shape[0] // n] * n)
        store, self.i = _store(), self.i + 1
        keys = [f"labkit-check/{self.token[0]}/a2a/{self.i}/{j}" for j in range(n)]
        store.set(keys[rank], json.dumps([int(v) for v in ins] + [int(v) for v in outs]))
        deadline = time.monotonic() + self.patience
        while not store.check(keys):
            gone = [j for j in range(n) if store.check([f"labkit-check/{self.token[0]}/call/{j}"])]
            if gone or time.monotonic() > deadline:
                raise _Stop(tr("rank {rank} waited in its all-to-all number {i} for rank {other}, "
                               "which never called it", rank=rank, i=self.i,
                               other=(gone or [j for j in range(n) if not store.check([keys[j]])])[0]))
            time.sleep(0.002)
        every = [json.loads(store.get(k)) for k in keys]
        for dst in range(n):
            for src in range(n):
                sent, expected = every[src][dst], every[dst][n + src]
                if sent != expected:
                    raise _Stop(tr("in all-to-all number {i} rank {dst} expects {expected} rows from rank "
                                   "{src}, which sends {sent}: a rank only knows what it sends; exchange "
                                   "the split sizes first (an all-to-all of the counts), and in the combine "
                                   "swap input and output splits", i=self.i, dst=dst, expected=expected,
                                   src=src, sent=sent))
        return self.real(output, input, output_split_sizes, input_split_sizes, group=group, **kw)


def _data(n, r):
    """Every rank's rows (skewed, uneven), the experts (float64), the same on every rank."""
    import torch
    from labkit.moe.layer import Expert
    g = torch.Generator().manual_seed(13)
    torch.manual_seed(13)
    experts = torch.nn.ModuleList(Expert(_H, _F) for _ in range(2 * n)).double()
    pop = torch.tensor([4.0] + [1.0] * (2 * n - 1))
    rows = []
    for src in range(n):
        m = 5 + 3 * src
        e = torch.sort(torch.multinomial(pop, m, replacement=True, generator=g)).values
        rows.append((torch.randn(m, _H, generator=g, dtype=torch.float64), e,
                     0.2 + 0.8 * torch.rand(m, generator=g, dtype=torch.float64),
                     torch.randn(m, _H, generator=g, dtype=torch.float64)))
    return experts, rows


def _case(fn, token):
    import torch
    import torch.distributed as dist
    from labkit.check.guard import attempt, settle
    n, r = dist.get_world_size(), dist.get_rank()
    experts, rows = _data(n, r)
    want_gx = None
    every = torch.stack([e(rows[r][0]) for e in experts])            # (E, M, h): all experts
    for src, (x, e, g, w) in enumerate(rows):                         # the reference gradients
        x = x.clone().requires_grad_()
        (w * g[:, None] * torch.stack([experts[int(k)](x[i]) for i, k in enumerate(e)])).sum().backward()
        want_gx = x.grad if src == r else want_gx
    mine = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in experts[2 * r:2 * r + 2].parameters()]
    experts.zero_grad(set_to_none=True)
    x, e, g, w = rows[r]
    xs = x.clone().requires_grad_()
    local = experts[2 * r:2 * r + 2]
    out, caught = None, None
    with _Splits(token, token[1]):                                    # forward and backward
        out, caught = attempt(fn, xs, e.clone(), g.clone(), local, None)
        if caught is None and isinstance(out, torch.Tensor) and out.shape == x.shape and out.requires_grad:
            _, caught = attempt(lambda: (out * w).sum().backward())
    stop = caught is not None and caught.type == "_Stop"
    problem = caught.message if stop else None
    flagged = settle(token, "call", None if stop or caught is None else caught)
    if caught is not None and not stop:
        if "Split sizes doesn't match" in caught.message:
            caught.hint = tr("the splits must add up to the rows you pass: in the combine, swap input "
                             "and output splits (send back what you received)")
        if caught.type == "IndexError":
            caught.hint = tr("`experts` holds only this rank's E/n experts: expert e is "
                             "experts[e - rank * E/n]")
        return {"raised": caught}
    if any(flagged) and problem is None:
        return {"problem": None}
    with torch.no_grad():
        unit = torch.cat([torch.stack([experts[int(k)](xx[i]) for i, k in enumerate(ee)]) for xx, ee, _, _ in rows])
    whose = [(src, i) for src, (xx, _, _, _) in enumerate(rows) for i in range(len(xx))]
    res = {"problem": problem, "all_unit": unit, "whose": whose, "out": None if out is None else out.detach(), "x": x, "e": e,
           "g": g, "every": every.detach(), "gx": xs.grad, "want_gx": want_gx, "n": n, "rank": r,
           "gw": [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in local.parameters()], "want_gw": mine}
    return res


def _close(a, b):
    return a is not None and tuple(a.shape) == tuple(b.shape) and bool((a - b).abs().max() < 1e-9)


def diagnose(res: dict) -> str:
    """'' when the rank's rows and gradients are right, else the first mistake found."""
    import torch
    if res.get("problem"):
        return res["problem"]
    r, out, e, g, every, n = res["rank"], res["out"], res["e"], res["g"], res["every"], res["n"]
    want = g[:, None] * every[e, torch.arange(len(e))]
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(want.shape):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return tr("rank {r}: returned {shape}, expected a tensor of shape {want} (one row per row of xs)",
                  r=r, shape=shape, want=tuple(want.shape))
    if not _close(out, want):
        if _close(out, g[:, None] * want):
            return tr("rank {r}: the gates are applied twice (gate^2 x expert(row)): multiply by the gate "
                      "once, after the combine", r=r)
        if _close(out, want / g[:, None]):
            return tr("rank {r}: the gates are missing: each row comes back as expert(row); multiply it by "
                      "its gate", r=r)
        plain, unit = out / g[:, None], res["all_unit"]           # before the gates; every rank's rows
        match = [[k for k in range(len(unit)) if _close(plain[i], unit[k])] for i in range(len(out))]
        if all(match):
            own = [j for j, (src, _) in enumerate(res["whose"]) if src == r][0]
            i = next(i for i in range(len(out)) if own + i not in match[i])
            src, k = res["whose"][match[i][0]]
            return tr("rank {r}: every row is a right result but in the wrong place (row {i} holds the "
                      "result of rank {src}'s row {k}): put the expert outputs back in arrival order (undo "
                      "the regrouping by expert) before the combine", r=r, i=i, src=src, k=k)
        which = [[k for k in range(len(every)) if _close(out[i], g[i] * every[k, i])] for i in range(len(out))]
        bad = [i for i in range(len(out)) if which[i] and which[i][0] != int(e[i])]
        if bad:
            i, got, L = bad[0], which[bad[0]][0], len(every) // n
            rr = tr(" (expert e on rank e % n: round-robin)") if got == (int(e[i]) % n) * L + int(e[i]) // n else ""
            return tr("rank {r}: row {i} went through expert {got} instead of expert {want}{rr}: expert e "
                      "lives on rank e // (E/n) as local expert e % (E/n), and rows arrive grouped by "
                      "source rank first: regroup them by expert before running the experts",
                      r=r, i=i, got=got, want=int(e[i]), rr=rr)
        return tr("rank {r}: the rows differ from gate x expert(row) by {err:.3g}", r=r,
                  err=(out - want).abs().max().item())
    if res["gx"] is None:
        return tr("rank {r}: no gradient reached xs: torch's dist.all_to_all_single does not "
                  "differentiate; send the rows with labkit.moe.all_to_all", r=r)
    if not _close(res["gx"], res["want_gx"]):
        return tr("rank {r}: the gradient of xs differs from one process by {err:.3g}", r=r,
                  err=(res["gx"] - res["want_gx"]).abs().max().item())
    if any(not _close(a, b) for a, b in zip(res["gw"], res["want_gw"])):
        return tr("rank {r}: an expert's weight gradient differs from one process (every rank's rows "
                  "must reach it)", r=r)
    return ""


@checker("ep_dispatch")
def ep_dispatch(fn, cluster, timeout: float = HANG_LIMIT_S):
    if cluster.world_size < 2:
        return False, tr("needs a cluster of at least 2 ranks")
    token = new_token(timeout)
    results = cluster.run(_case, fn, token, timeout=timeout)
    found = ranks_verdict(results)
    if found:
        return found
    for res in results:
        why = diagnose(res)
        if why:
            return False, why
    return True, tr("{n} ranks, {e} experts, uneven skewed rows: outputs and the gradients of the rows "
                    "and of every expert equal one process", n=cluster.world_size, e=2 * cluster.world_size)
