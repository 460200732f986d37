"""What notebook 14's checker (labkit.check.capstone) judges without processes: the learner's
grid(dp, pp, tp, cp) on several layouts against `labkit.nd.layout.Layout` (a grid in another
order is named by its order; groups of another dimension, ranks off by one, missing or doubled
ranks each have their sentence), and reduce_over(kind) against the rule (each wrong dimension
with why). Pure: no process; the run on the real ranks is in capstone.py.
"""
import itertools

from labkit.i18n import N_, tr

DIMS = ("dp", "pp", "tp", "cp")
# (dp, pp, tp, cp): the notebook's 2 x 2 x 2 and its CP variant, all four, uneven ones
LAYOUTS = [(2, 2, 2, 1), (2, 1, 2, 2), (2, 2, 2, 2), (4, 1, 2, 1), (1, 2, 4, 1), (3, 2, 2, 1),
           (2, 3, 1, 2), (1, 1, 1, 1)]
KINDS = ("replicated", "tp_split", "expert")
RULE = {"replicated": {"dp", "cp", "tp"}, "tp_split": {"dp", "cp"}, "expert": {"edp"}}
NAMES = ("dp", "pp", "tp", "cp", "ep", "edp")
_FIRST = ("dp", "cp", "tp", "edp", "pp", "ep")     # the order missing or extra dimensions are named in
_KIND = {"replicated": N_("a replicated parameter's gradient (a norm's weight)"),
         "tp_split": N_("a TP-split weight's gradient"),
         "expert": N_("an expert weight's gradient")}
_WHY_MISSING = {
    "dp": N_("each DP replica saw other samples of the batch, so its gradient is a part of the sum"),
    "cp": N_("each CP rank saw only its chunks of every sequence, so its gradient is a part of the "
          "sum (forgetting CP is the capstone's first wrong variant: the loss curve drifts)"),
    "tp": N_("every TP rank holds this parameter whole but saw only its part of the activations "
          "(sequence parallelism: s / tp of the tokens each), so its gradient is a part of the sum"),
    "edp": N_("an expert's replicas (the ranks with the same ep index, EDP = CP x DP / EP of them) each "
           "routed other tokens to it"),
}
_WHY_EXTRA = {
    "pp": N_("each pipeline stage holds other layers: there is nothing to sum over pp"),
    "tp": N_("each TP rank holds a different slice of a TP-split weight, so summing over tp adds the "
          "gradients of different slices"),
    "ep": N_("the ranks of an EP group hold different experts: summing over ep adds the gradients of "
          "different experts"),
    "dp": N_("an expert's weights live on one rank of each EP group, and the dp group also reaches ranks "
          "that hold other experts: reduce over edp, the ranks that hold the same experts"),
    "cp": N_("an expert's weights live on one rank of each EP group, and the cp group also reaches ranks "
          "that hold other experts: reduce over edp, the ranks that hold the same experts"),
    "edp": N_("edp is the experts' data-parallel group; a dense parameter is reduced over dp and cp"),
}


def layout(dp, pp, tp, cp, ep=1):
    from labkit.nd.layout import Layout
    return Layout(dp=dp, pp=pp, tp=tp, cp=cp, ep=ep, gpus_per_node=max(8, dp * pp * tp * cp))


def reference(dp, pp, tp, cp, order=None) -> dict:
    from labkit.nd.layout import Layout
    lay = Layout(dp=dp, pp=pp, tp=tp, cp=cp, gpus_per_node=max(8, dp * pp * tp * cp),
                 order=order or "tp-cp-pp-dp")
    out = {}
    for d in DIMS:
        if getattr(lay, d) == 1:
            out[d] = [[r] for r in range(lay.world_size)]
        else:
            out[d] = lay.groups(d)
    return out


def _as_sets(groups) -> set:
    return {frozenset(g) for g in groups}


def _ranks(value, d, shape) -> list:
    """The learner's groups of one dimension as lists of ints, or ValueError with a sentence."""
    try:
        groups = [[int(r) for r in g] for g in value]
    except (TypeError, ValueError):
        raise ValueError(tr("{shape}: {d} is {value!r}; return a list of groups, each a list of ranks "
                            "(e.g. [[0, 1], [2, 3]])", shape=shape, d=d, value=value)) from None
    return groups


def _other_order(got: dict, dp, pp, tp, cp):
    """The order (fastest first) in which the learner's grid is laid out, if it is another one."""
    named = ["tp", "pp", "dp"] + (["cp"] if cp > 1 else [])
    for perm in itertools.permutations(named):
        if perm[:2] == ("tp", "cp") and perm[2:] == ("pp", "dp"):
            continue
        ref = reference(dp, pp, tp, cp, order="-".join(perm))
        if all(_as_sets(got[d]) == _as_sets(ref[d]) for d in DIMS):
            size = dict(dp=dp, pp=pp, tp=tp, cp=cp)
            return "-".join(d for d in perm if size[d] > 1)     # a degree of 1 has no place
    return None


def judge_grid(grid, layouts=LAYOUTS):
    """(ok, detail) without processes: grid(dp, pp, tp, cp) on every layout against the notes'."""
    for dp, pp, tp, cp in layouts:
        shape = f"dp {dp} x pp {pp} x tp {tp} x cp {cp}"
        world = dp * pp * tp * cp
        want = reference(dp, pp, tp, cp)
        got = grid(dp=dp, pp=pp, tp=tp, cp=cp)
        if not isinstance(got, dict):
            return False, tr("{shape}: your grid returned {kind}; return a dict "
                             "{{'dp': groups, 'pp': groups, 'tp': groups, 'cp': groups}}",
                             shape=shape, kind=type(got).__name__)
        missing = [d for d in DIMS if d not in got]
        if missing:
            return False, tr("{shape}: the dict has no {missing}; give every dimension, with groups of "
                             "one rank where its degree is 1", shape=shape, missing=", ".join(missing))
        try:
            got = {d: _ranks(got[d], d, shape) for d in DIMS}
        except ValueError as exc:
            return False, str(exc)
        degree = dict(dp=dp, pp=pp, tp=tp, cp=cp)
        for d in DIMS:
            flat = [r for g in got[d] for r in g]
            outside = sorted({r for r in flat if not 0 <= r < world})
            if outside:
                f = dict(shape=shape, d=d, r=outside[0], last=world - 1)
                return False, (tr("{shape}: your {d} groups hold rank {r}, but the ranks are 0..{last} "
                                  "(counted from 1?)", **f) if outside[0] == world else
                               tr("{shape}: your {d} groups hold rank {r}, but the ranks are 0..{last}", **f))
            sizes = sorted({len(g) for g in got[d]})
            if sizes != [degree[d]]:
                same = [o for o in DIMS if o != d and sizes == [degree[o]] and degree[o] != degree[d]]
                f = dict(shape=shape, d=d, sizes=" or ".join(map(str, sizes)), k=degree[d])
                if same:
                    return False, tr("{shape}: your {d} groups have {sizes} ranks, a {d} group has {d} = {k} "
                                     "ranks (one per {d} coordinate): those are {o}'s sizes, are two "
                                     "dimensions swapped?", o=same[0], **f)
                return False, tr("{shape}: your {d} groups have {sizes} ranks, a {d} group has {d} = {k} "
                                 "ranks (one per {d} coordinate)", **f)
            twice = sorted({r for r in flat if flat.count(r) > 1})
            absent = sorted(set(range(world)) - set(flat))
            if twice or absent:
                return False, tr("{shape}: in your {d} groups rank {r} is {how}: the groups of one "
                                 "dimension split the {world} ranks, each rank in exactly one",
                                 shape=shape, d=d, r=(twice or absent)[0], world=world,
                                 how=tr("in two groups") if twice else tr("in no group"))
        wrong = [d for d in DIMS if _as_sets(got[d]) != _as_sets(want[d])]
        if not wrong:
            continue
        order = _other_order(got, dp, pp, tp, cp)
        if order:
            return False, tr("{shape}: your grid is laid out {order} (fastest-varying first); the "
                             "course's is {want}: rank = ((dp x PP + pp) x CP + cp) x TP + tp, "
                             "picotron's torch.arange(world).view(dp, pp, cp, tp); TP innermost keeps "
                             "each TP group on neighbouring ranks, inside a node", shape=shape,
                             order=order, want="-".join(d for d in ("tp", "cp", "pp", "dp") if degree[d] > 1))
        d = wrong[0]
        for o in DIMS:
            if o != d and degree[o] == degree[d] and _as_sets(got[d]) == _as_sets(want[o]):
                return False, tr("{shape}: your {d} groups are the grid's {o} groups (rank 0's {d} "
                                 "group is {want}, not {got})", shape=shape, d=d, o=o,
                                 want=next(g for g in want[d] if 0 in g),
                                 got=next(g for g in got[d] if 0 in g))
        bad = next(g for g in got[d] if frozenset(g) not in _as_sets(want[d]))
        r = bad[0]
        return False, tr("{shape}: your {d} group {got} is not one of the grid's: rank {r}'s {d} group "
                         "is {want} (the ranks that differ only in their {d} coordinate)",
                         shape=shape, d=d, got=bad, r=r, want=next(g for g in want[d] if r in g))
    return True, tr("the grid equals the notes' on {n} layouts", n=len(layouts))


def dims_of(reduce_over, kind) -> set:
    got = reduce_over(kind)
    if isinstance(got, str):
        got = [got]
    try:
        got = [str(d).lower() for d in got]
    except TypeError:
        raise ValueError(tr("reduce_over({kind!r}) returned {value!r}; return the dimensions' names, "
                            "e.g. ['dp', 'cp']", kind=kind, value=got)) from None
    unknown = [d for d in got if d not in NAMES]
    if unknown:
        f = dict(kind=kind, d=unknown[0], names=", ".join(NAMES))
        raise ValueError(tr("reduce_over({kind!r}) returned {d!r}, not a dimension: the names are "
                            "{names} (the whole world is every dimension at once, and the pipeline "
                            "stages hold different layers)", **f) if unknown[0] in ("world", "all") else
                         tr("reduce_over({kind!r}) returned {d!r}, not a dimension: the names are "
                            "{names}", **f))
    return set(got)


def judge_rule(reduce_over):
    """(ok, detail) without processes: the dimensions of each kind against RULE."""
    for kind in KINDS:
        got = dims_of(reduce_over, kind)
        want = RULE[kind]
        if got == want:
            continue
        extra = sorted(got - want, key=_FIRST.index)
        missing = sorted(want - got, key=_FIRST.index)
        said = ", ".join(sorted(got, key=NAMES.index)) or tr("nothing")
        if extra:
            d = extra[0]
            why = _WHY_EXTRA[d]
            return False, tr("reduce_over({kind!r}): {what} is summed over {said}; {d} does not belong "
                             "there: {why}", kind=kind, what=tr(_KIND[kind]), said=said, d=d, why=tr(why))
        d = missing[0]
        return False, tr("reduce_over({kind!r}): {what} is summed over {said} but must be over {d} too: "
                         "{why}", kind=kind, what=tr(_KIND[kind]), said=said, d=d, why=tr(_WHY_MISSING[d]))
    return True, tr("replicated: dp, cp, tp; TP-split: dp, cp; experts: edp")
