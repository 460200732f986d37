"""Checker for notebook 14 (the capstone): the grid's process groups and the gradient-reduction rule.

`capstone_groups(grid, reduce_over)`, where the learner writes

    grid(dp, pp, tp, cp) -> {"dp": [[ranks], ...], "pp": [...], "tp": [...], "cp": [...]}
        every group of each dimension over dp x pp x tp x cp ranks, laid out as the notes
        (picotron's ``torch.arange(world).view(dp, pp, cp, tp)``: TP fastest, then CP, PP, DP)
    reduce_over(kind) -> the dimensions a parameter's gradient is summed over, for kind
        "replicated" (every TP rank holds it whole: norms, biases after a row-parallel layer),
        "tp_split" (column- or row-parallel weights) and "expert" (an expert's weights, EP inside
        CP x DP): DP and CP always, TP for replicated parameters only, experts over their
        expert-data-parallel replicas ("edp") only.

Judged without processes first (capstone_judge.py), under the ranks' time limit
(`guard.time_limit`): the grid on several layouts against `labkit.nd.layout.Layout` (a grid in
another order is named by its order; groups of another dimension, ranks off by one, missing or
doubled ranks each have their sentence), then the rule, each wrong dimension with why. Then,
when a cluster is running, one run on the real ranks: every rank makes the learner's groups with
`dist.new_group`, sums a gradient of 2^rank over the learner's dimensions, and the sum must be
the one over the ranks whose data reaches that parameter (the bits say which ranks were summed).
"""
from labkit.check.capstone_judge import DIMS, KINDS, NAMES, dims_of, judge_grid, judge_rule, layout, reference
from labkit.check.core import not_implemented, report
from labkit.check.guard import HANG_LIMIT_S, OutOfTime, time_limit
from labkit.i18n import tr

__all__ = ["capstone_groups"]

NAME = "capstone_groups"


def ranks_layout(world: int):
    """(dp, pp, tp, cp, ep) for the run on `world` real ranks: every dimension it can hold."""
    for shape in ((2, 2, 2, 2, 2), (2, 1, 2, 2, 2), (2, 2, 2, 1, 2), (2, 1, 2, 1, 2), (2, 1, 1, 1, 2)):
        if world == shape[0] * shape[1] * shape[2] * shape[3]:
            return shape
    return (world, 1, 1, 1, 1)


def _on_rank(groups: dict, dims: dict, shape):
    """On every rank: make the learner's groups, sum 2^rank over each kind's dimensions."""
    import torch
    import torch.distributed as dist
    from labkit.comm.groups import once
    dp, pp, tp, cp, ep = shape
    me = dist.get_rank()
    lay = layout(dp, pp, tp, cp, ep)
    every = dict(groups)
    every["ep"], every["edp"] = (lay.groups("ep"), lay.groups("edp")) if ep > 1 else \
        ([[r] for r in range(lay.world_size)], [g for g in reference(dp, pp, tp, cp)["dp"]])
    key = ("check.capstone", tuple((d, tuple(map(tuple, every[d]))) for d in NAMES))

    def make():
        mine = {}
        for d in NAMES:
            for g in every[d]:
                pg = dist.new_group(sorted(g))
                if me in g:
                    mine[d] = pg
        return mine
    pgs = once(key, make)
    out = {}
    for kind in KINDS:
        t = torch.tensor([2.0 ** me], dtype=torch.float64)
        for d in sorted(dims[kind], key=NAMES.index):
            dist.all_reduce(t, group=pgs[d])
        out[kind] = int(t.item())
    return out


def _want(shape, rank, kind) -> int:
    dp, pp, tp, cp, ep = shape
    lay = layout(dp, pp, tp, cp, ep)
    c = lay.coords(rank)
    if kind == "expert":
        ranks = lay.group_of(rank, "edp") if ep > 1 else lay.group_of(rank, "dp")
    else:
        axes = {"dp": range(dp), "cp": range(cp), "tp": range(tp) if kind == "replicated" else [c.tp]}
        ranks = [lay.rank_of(dp=a, pp=c.pp, tp=t, cp=b) for a in axes["dp"] for b in axes["cp"]
                 for t in axes["tp"]]
    return sum(2 ** q for q in ranks)


def _bits(v: int) -> list:
    return [q for q in range(v.bit_length()) if v >> q & 1]


def capstone_groups(grid, reduce_over, cluster=None, timeout: float = HANG_LIMIT_S) -> bool:
    """grid(dp, pp, tp, cp) and reduce_over(kind), judged without processes, then (when a cluster
    runs, or `cluster` is given; cluster=False: without ranks) summed on the real ranks."""
    from labkit.runtime import cluster as _cluster
    try:
        with time_limit(timeout):       # the learner's code runs here: the ranks' limit for it too
            ok, detail = judge_grid(grid)
            if ok:
                ok, rule = judge_rule(reduce_over)
                detail = detail + "; " + rule if ok else rule
            if ok:
                c = _cluster.current() if cluster is None else (cluster or None)
                shape = ranks_layout(c.world_size) if c is not None else None
                if shape is not None:
                    dp, pp, tp, cp, _ = shape
                    groups = {d: [[int(r) for r in g] for g in v]
                              for d, v in grid(dp=dp, pp=pp, tp=tp, cp=cp).items() if d in DIMS}
                    dims = {k: dims_of(reduce_over, k) for k in KINDS}
    except NotImplementedError:
        return not_implemented(NAME)
    except OutOfTime as exc:
        return report(NAME, False, exc.describe())
    except ValueError as exc:
        return report(NAME, False, str(exc))
    except Exception as exc:            # noqa: BLE001 - a checker never raises at the learner
        return report(NAME, False, tr("raised {error}", error=f"{type(exc).__name__}: {exc}"))
    if not ok or shape is None:
        if ok:
            detail = tr("{judged} (without ranks: start labkit.Cluster(8) to sum real gradients too)",
                        judged=detail)
        return report(NAME, ok, detail)
    try:
        got = c.run(_on_rank, groups, dims, shape, timeout=max(timeout, 30.0))
    except Exception as exc:            # noqa: BLE001
        from labkit.check.core import describe_failure
        return report(NAME, False, describe_failure(exc))
    for r, res in enumerate(got):
        for kind in KINDS:
            want = _want(shape, r, kind)
            if res[kind] != want:
                return report(NAME, False, tr("on rank {r} the {kind} gradient summed ranks {got}; one "
                                              "process's gradient sums ranks {want}", r=r, kind=kind,
                                              got=_bits(res[kind]), want=_bits(want)))
    dp, pp, tp, cp, ep = shape
    return report(NAME, True, tr("{judged}; on {n} ranks (dp {dp} x pp {pp} x tp {tp} x cp {cp}, ep {ep}) "
                                 "every gradient sums the ranks one process's does", judged=detail,
                                 n=c.world_size, dp=dp, pp=pp, tp=tp, cp=cp, ep=ep))
