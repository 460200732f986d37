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
all_to_all_single does not differentiate: labkit.moe.all_to_all does; or the experts ran under
torch.no_grad(); or the rows were detached), and a hang. Split lists are checked before the ranks
compare them: one entry per rank (not per expert), adding up to the rows passed, equal lengths
where no splits are given (torch.bincount without minlength).

When every rank was right, a second case runs the same function with expert parallelism on groups
of n/2 ranks (EP inside DP, notebook 13's section 7) and 3 experts per rank, passing `group`: an
answer that ignores `group`, asks get_world_size() of the whole world, or has 4 ranks or 2
experts per rank written in fails there.
"""
from labkit.check.core import checker, new_token, ranks_verdict
from labkit.check.guard import HANG_LIMIT_S
from labkit.check.moe_watch import Splits
from labkit.i18n import tr

__all__ = ["ep_dispatch"]

_H, _F = 6, 8


def _data(n, L=2):
    """Every rank's rows (skewed, uneven), the L n experts (float64), the same on every rank."""
    import torch
    from labkit.moe.layer import Expert
    seed = 13 if L == 2 else 13 + L
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    experts = torch.nn.ModuleList(Expert(_H, _F) for _ in range(L * n)).double()
    pop = torch.tensor([4.0] + [1.0] * (L * n - 1))
    rows = []
    for src in range(n):
        m = 5 + 3 * src
        p = pop.clone()
        if src == 0 and n > 1:
            p[-1] = 0               # rank 0 routes nothing to the last expert (a count of 0 to send)
        e = torch.multinomial(p, m, replacement=True, generator=g)
        if src == n - 1:
            e[-1] = L * n - 1       # and the last rank something: every expert of the last rank works
        e = torch.sort(e).values
        rows.append((torch.randn(m, _H, generator=g, dtype=torch.float64), e,
                     0.2 + 0.8 * torch.rand(m, generator=g, dtype=torch.float64),
                     torch.randn(m, _H, generator=g, dtype=torch.float64)))
    return experts, rows


def _second_groups():
    """(group, its global ranks, experts per rank) of this rank for the second case: expert
    parallelism on groups of n/2 ranks (EP inside DP, as notebook 13's section 7) with 3 experts
    per rank, or on single ranks when n/2 is not a whole group of 2 or more. Made once per
    process, every rank creating every group in order."""
    import torch.distributed as dist
    from labkit.comm.groups import once
    n, r = dist.get_world_size(), dist.get_rank()
    k = n // 2 if n >= 4 and n % 2 == 0 else 1
    parts = [list(range(i, i + k)) for i in range(0, n, k)]
    made = once(("check.moe", n), lambda: [(dist.new_group(p), p) for p in parts])
    return next((g, p, 3) for g, p in made if r in p)


def _case(fn, token):
    """Both cases on this rank: the whole world with 2 experts per rank, then (when every rank
    was right) groups of ranks with 3. The second case's result carries "group"."""
    import torch.distributed as dist
    from labkit.check.guard import settle
    n = dist.get_world_size()
    res = _one(fn, token, None, list(range(n)), 2, "call")
    why = diagnose(res) if "raised" not in res and res.get("problem") is None and "out" in res else ""
    flags = settle(token, "first", why or (None if "out" in res and not res.get("problem") else "x"))
    if any(flags):
        return res
    group, ranks, L = _second_groups()
    res = _one(fn, token, group, ranks, L, "call2")
    res["group"] = len(ranks)
    return res


def _one(fn, token, group, ranks, L, key):
    import torch
    import torch.distributed as dist
    from labkit.check.guard import attempt, settle
    n, r = len(ranks), ranks.index(dist.get_rank())
    experts, rows = _data(n, L)
    want_gx = None
    every = torch.stack([e(rows[r][0]) for e in experts])            # (E, M, h): all experts
    for src, (x, e, g, w) in enumerate(rows):                         # the reference gradients
        x = x.clone().requires_grad_()
        (w * g[:, None] * torch.stack([experts[int(k)](x[i]) for i, k in enumerate(e)])).sum().backward()
        want_gx = x.grad if src == r else want_gx
    local = experts[L * r:L * (r + 1)]
    mine = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in local.parameters()]
    experts.zero_grad(set_to_none=True)
    x, e, g, w = rows[r]
    xs = x.clone().requires_grad_()
    grad_mode = []
    hooks = [ex.register_forward_hook(lambda *a: grad_mode.append(torch.is_grad_enabled())) for ex in local]
    out, caught = None, None
    with Splits(token, token[1], group, ranks, key, L) as splits:    # forward and backward
        out, caught = attempt(fn, xs, e.clone(), g.clone(), local, group)
        if caught is None and isinstance(out, torch.Tensor) and out.shape == x.shape and out.requires_grad:
            _, caught = attempt(lambda: (out * w).sum().backward())
    for h in hooks:
        h.remove()
    stop = caught is not None and caught.type == "SplitStop"
    problem = caught.message if stop else None
    flagged = settle(token, key, None if stop or caught is None else caught)
    ungrouped = sorted(set(splits.ungrouped))
    if group is not None and ungrouped and (caught is not None or problem):
        return {"problem": tr("rank {r}: in the case on a group of size {k} your function asked "
                              "dist.{calls}() without the group, which answers for the whole world: pass "
                              "`group` to get_world_size, get_rank and every collective", r=dist.get_rank(),
                              k=n, calls="() and dist.".join(ungrouped))}
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
           "no_grad": bool(grad_mode) and not all(grad_mode), "direct_grad": splits.direct_grad,
           "out_graph": isinstance(out, torch.Tensor) and out.requires_grad,
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
            if got == (int(e[i]) % n) * L + int(e[i]) // n:
                return tr("rank {r}: row {i} went through expert {got} instead of expert {want} (expert e on "
                          "rank e % n: round-robin): expert e lives on rank e // (E/n) as local expert "
                          "e % (E/n), and rows arrive grouped by source rank first: regroup them by expert "
                          "before running the experts", r=r, i=i, got=got, want=int(e[i]))
            return tr("rank {r}: row {i} went through expert {got} instead of expert {want}: expert e "
                      "lives on rank e // (E/n) as local expert e % (E/n), and rows arrive grouped by "
                      "source rank first: regroup them by expert before running the experts",
                      r=r, i=i, got=got, want=int(e[i]))
        return tr("rank {r}: the rows differ from gate x expert(row) by {err:.3g}", r=r,
                  err=(out - want).abs().max().item())
    if res["gx"] is None:
        if res.get("no_grad"):
            return tr("rank {r}: no gradient reached xs or the experts' weights: your experts ran with "
                      "autograd off (torch.no_grad() or inference_mode), so there is no graph to go back "
                      "through; run them with autograd on", r=r)
        if res.get("direct_grad"):
            return tr("rank {r}: no gradient reached xs: torch's dist.all_to_all_single does not "
                      "differentiate; send the rows with labkit.moe.all_to_all", r=r)
        return tr("rank {r}: no gradient reached xs: your output is cut off from the rows' graph "
                  "(a .detach(), .data, a tensor rebuilt from values, or torch.no_grad() around a step); "
                  "keep every step from xs to the output differentiable", r=r)
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
    second = results[0].get("group")
    found = ranks_verdict(results)
    if not found:
        why = next((w for w in map(diagnose, results) if w), "")
        found = (False, why) if why else None
    if found:
        if second is not None:
            return False, tr("in the second case (expert parallelism on groups of size {k}, {L} experts "
                             "per rank, the function's `group` argument): {why}", k=second, L=3, why=found[1])
        return found
    n = cluster.world_size
    return True, tr("{n} ranks, {e} experts, uneven skewed rows: outputs and the gradients of the rows "
                    "and of every expert equal one process; the same on groups of size {k} with 3 experts "
                    "per rank (group=...)", n=n, e=2 * n, k=second)
