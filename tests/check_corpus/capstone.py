"""Answers to notebook 14's exercise (labkit.check.capstone_groups): the grid's process groups
and the gradient-reduction rule. RIGHT pass; each of WRONG must get its diagnosis
(name, (grid, reduce_over), words in the line)."""
import itertools

import torch


# -- grids ----------------------------------------------------------------------------------------
def _groups(view, names, dims):
    """Every group of each dimension of a view whose axes are `names` (outermost first)."""
    out = {}
    for d in dims:
        axis = names.index(d)
        moved = view.movedim(axis, -1).reshape(-1, view.shape[axis])
        out[d] = moved.tolist()
    return out


def grid(dp, pp, tp, cp=1):
    """picotron's way: one view of arange(world), each group along one axis."""
    view = torch.arange(dp * pp * cp * tp).view(dp, pp, cp, tp)
    return _groups(view, ["dp", "pp", "cp", "tp"], ["dp", "pp", "tp", "cp"])


def grid_formula(dp, pp, tp, cp=1):
    """From the rank formula, one dimension at a time."""
    def rank(d, p, c, t):
        return ((d * pp + p) * cp + c) * tp + t
    out = {"dp": [], "pp": [], "tp": [], "cp": []}
    for d, p, c, t in itertools.product(range(dp), range(pp), range(cp), range(tp)):
        if d == 0:
            out["dp"].append([rank(i, p, c, t) for i in range(dp)])
        if p == 0:
            out["pp"].append([rank(d, i, c, t) for i in range(pp)])
        if t == 0:
            out["tp"].append([rank(d, p, c, i) for i in range(tp)])
        if c == 0:
            out["cp"].append([rank(d, p, i, t) for i in range(cp)])
    return out


def grid_tensors(dp, pp, tp, cp=1):
    """Groups as tensors (rows of the view), in another order of groups."""
    view = torch.arange(dp * pp * cp * tp).view(dp, pp, cp, tp)
    return {"tp": list(view.reshape(-1, tp)), "cp": list(view.transpose(2, 3).reshape(-1, cp))[::-1],
            "pp": list(view.permute(0, 2, 3, 1).reshape(-1, pp)),
            "dp": list(view.permute(1, 2, 3, 0).reshape(-1, dp))}


def _view_grid(order):
    """A grid laid out `order` (outermost first)."""
    def g(dp, pp, tp, cp=1):
        size = dict(dp=dp, pp=pp, tp=tp, cp=cp)
        view = torch.arange(dp * pp * tp * cp).view(*[size[d] for d in order])
        return _groups(view, list(order), ["dp", "pp", "tp", "cp"])
    return g


tp_outermost = _view_grid(("tp", "cp", "pp", "dp"))       # view(tp, cp, pp, dp): the order reversed
pp_innermost = _view_grid(("dp", "cp", "tp", "pp"))
cp_innermost = _view_grid(("dp", "pp", "tp", "cp"))       # CP inside TP
megatron_pp_outer = _view_grid(("pp", "dp", "cp", "tp"))  # Megatron-core's PP outermost


def no_cp(dp, pp, tp, cp=1):
    out = grid(dp, pp, tp, cp)
    del out["cp"]
    return out


def from_one(dp, pp, tp, cp=1):
    return {d: [[r + 1 for r in g] for g in v] for d, v in grid(dp, pp, tp, cp).items()}


def dp_tp_swapped(dp, pp, tp, cp=1):
    out = grid(dp, pp, tp, cp)
    out["dp"], out["tp"] = out["tp"], out["dp"]
    return out


def dp_stride_tp(dp, pp, tp, cp=1):
    """DP groups strided by TP only (forgot PP x CP between replicas)."""
    out = grid(dp, pp, tp, cp)
    world = dp * pp * tp * cp
    out["dp"] = [[b * tp * dp + s + i * tp for i in range(dp)] for b in range(world // (tp * dp))
                 for s in range(tp)]
    return out


def my_group_only(dp, pp, tp, cp=1):
    """Only rank 0's group of each dimension (what one rank would pass to new_group)."""
    return {d: v[:1] for d, v in grid(dp, pp, tp, cp).items()}


def contiguous_blocks(dp, pp, tp, cp=1):
    """Every dimension cut into consecutive blocks of its degree."""
    world = dp * pp * tp * cp
    size = dict(dp=dp, pp=pp, tp=tp, cp=cp)
    return {d: [list(range(s, s + size[d])) for s in range(0, world, size[d])] for d in size}


def one_rank_twice(dp, pp, tp, cp=1):
    out = grid(dp, pp, tp, cp)
    if dp * pp * tp * cp > 1 and dp > 1:
        out["dp"][0] = [out["dp"][0][0]] * dp
    return out


def returns_list(dp, pp, tp, cp=1):
    return list(grid(dp, pp, tp, cp).values())


def stub_grid(dp, pp, tp, cp=1):
    raise NotImplementedError


def endless_grid(dp, pp, tp, cp=1):
    while True:
        pass


# -- rules ------------------------------------------------------------------------------------------
def rule(kind):
    return {"replicated": ["dp", "cp", "tp"], "tp_split": ["dp", "cp"], "expert": ["edp"]}[kind]


def rule_if(kind):
    dims = {"dp", "cp"} if kind != "expert" else {"edp"}
    if kind == "replicated":
        dims.add("tp")
    return tuple(dims)


def no_cp_rule(kind):
    return {"replicated": ["dp", "tp"], "tp_split": ["dp"], "expert": ["edp"]}[kind]


def tp_for_all(kind):
    return {"replicated": ["dp", "cp", "tp"], "tp_split": ["dp", "cp", "tp"], "expert": ["edp"]}[kind]


def tp_never(kind):
    return {"replicated": ["dp", "cp"], "tp_split": ["dp", "cp"], "expert": ["edp"]}[kind]


def experts_like_dense(kind):
    return {"replicated": ["dp", "cp", "tp"], "tp_split": ["dp", "cp"], "expert": ["dp", "cp"]}[kind]


def experts_over_ep(kind):
    return {"replicated": ["dp", "cp", "tp"], "tp_split": ["dp", "cp"], "expert": ["ep"]}[kind]


def experts_not_reduced(kind):
    return {"replicated": ["dp", "cp", "tp"], "tp_split": ["dp", "cp"], "expert": []}[kind]


def pp_too(kind):
    return rule(kind) + (["pp"] if kind != "expert" else [])


def whole_world(kind):
    return ["world"]


def edp_for_dense(kind):
    return {"replicated": ["edp", "tp"], "tp_split": ["edp"], "expert": ["edp"]}[kind]


def only_dp(kind):
    return ["dp"]


def stub_rule(kind):
    raise NotImplementedError


RIGHT = [("view", (grid, rule)), ("formula, set rule", (grid_formula, rule_if)),
         ("tensors, reordered", (grid_tensors, rule))]
WRONG = [
    ("stub grid", (stub_grid, rule), "not implemented yet"),
    ("stub rule", (grid, stub_rule), "not implemented yet"),
    ("endless grid", (endless_grid, rule), "hung"),
    ("TP outermost", (tp_outermost, rule), "laid out dp-pp-tp (fastest-varying first)"),
    ("PP innermost", (pp_innermost, rule), "laid out pp-tp-dp"),
    ("CP inside TP", (cp_innermost, rule), "laid out cp-tp-dp"),
    ("PP outermost (Megatron-core)", (megatron_pp_outer, rule), "laid out tp-dp-pp"),
    ("no cp key", (no_cp, rule), "the dict has no cp"),
    ("ranks from 1", (from_one, rule), "(counted from 1?)"),
    ("dp and tp swapped", (dp_tp_swapped, rule), "laid out dp-pp-tp"),
    ("dp strided by tp", (dp_stride_tp, rule), "your dp groups are the grid's pp groups"),
    ("rank 0's groups only", (my_group_only, rule), "in no group"),
    ("consecutive blocks", (contiguous_blocks, rule), "your dp groups are the grid's tp groups"),
    ("a rank twice", (one_rank_twice, rule), "rank 0 is in two groups"),
    ("a list, not a dict", (returns_list, rule), "your grid returned list"),
    ("CP not reduced", (grid, no_cp_rule), "must be over cp too"),
    ("TP for TP-split weights", (grid, tp_for_all), "summing over tp adds the gradients of different slices"),
    ("TP never", (grid, tp_never), "sequence parallelism"),
    ("experts like dense weights", (grid, experts_like_dense), "reduce over edp, the ranks that hold the same experts"),
    ("experts over ep", (grid, experts_over_ep), "adds the gradients of different experts"),
    ("experts not reduced", (grid, experts_not_reduced), "summed over nothing but must be over edp"),
    ("pp too", (grid, pp_too), "nothing to sum over pp"),
    ("the whole world", (grid, whole_world), "not a dimension"),
    ("edp for dense", (grid, edp_for_dense), "a dense parameter is reduced over dp and cp"),
    ("only dp", (grid, only_dp), "must be over cp too"),
]
