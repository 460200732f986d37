"""A backward split in two halves, as zero-bubble schedules need (layer 3: torch).

    saved = backward_input(y, g, x, weights)     # I: x.grad set; each layer's gradient kept
    backward_weight(saved)                       # W: weight gradients only, from what I kept

I computes the gradient of the stage's input: the previous stage waits for it. On its way
down it passes every layer whose weights need a gradient, at the node where the weights join
the activation path (a Linear's addmm). A pre-hook keeps the gradient arriving at that node.
W then starts from those nodes, one layer at a time, and asks only for the weights: autograd
runs the addmm's weight half and nothing below it, so no activation gradient is computed twice.
This is what torch.distributed.pipelining does (`stage_backward_input` / `stage_backward_weight`
in torch/distributed/pipelining/_backward.py).

The naive W, `torch.autograd.backward(y, g, inputs=weights)`, starts again from the stage's
output: to reach the first layer's weights it recomputes the whole chain of activation
gradients that I already computed (`backward_cost` counts both).
"""
import torch
from torch.autograd.graph import GradientEdge

__all__ = ["backward_input", "backward_weight", "grad_node"]


def grad_node(t: torch.Tensor):
    """The autograd node that receives t's gradient: its grad_fn, or a leaf's AccumulateGrad."""
    if t.grad_fn is not None:
        return t.grad_fn
    if t.requires_grad:
        return t.view_as(t).grad_fn.next_functions[0][0]
    return None


def _parents(root) -> tuple:
    """({node: nodes that feed it a gradient} for the graph below root, {id(leaf): its
    AccumulateGrad node}), in one walk."""
    parents, leaves, todo, seen = {}, {}, [root], {root}
    while todo:
        node = todo.pop()
        for child, _ in node.next_functions:
            if child is None:
                continue
            parents.setdefault(child, []).append(node)
            if child not in seen:
                seen.add(child)
                todo.append(child)
                leaf = getattr(child, "variable", None)      # AccumulateGrad of a leaf tensor
                if leaf is not None:
                    leaves[id(leaf)] = child
    return parents, leaves


def _above(starts, parents, stop=frozenset()) -> tuple:
    """Nodes reachable upwards (towards the output) from starts, not crossing `stop`; and the
    stop nodes met."""
    seen, met, todo = set(starts), set(), list(starts)
    while todo:
        for up in parents.get(todo.pop(), ()):
            if up in stop:
                met.add(up)
            elif up not in seen:
                seen.add(up)
                todo.append(up)
    return seen, met


def backward_input(y, g, x, weights) -> list:
    """I: set x.grad to d(y.g)/dx, and return what W needs: [(weights, [(node, grads)])], one
    entry per group of weights that join the activation path at the same nodes (a layer)."""
    parents, leaves = _parents(grad_node(y))
    node_of = (lambda t: leaves.get(id(t)) or grad_node(t))
    path, _ = _above([node_of(x)], parents)              # nodes between the input and the output
    groups = {}
    for q in weights:
        _, joins = _above([node_of(q)], parents, stop=path)
        if not joins:
            raise ValueError(f"a weight of shape {tuple(q.shape)} never meets the path from the stage's "
                             "input to its output: split the backward only where the output depends on "
                             "the input (use one fused backward otherwise)")
        key = frozenset(joins)
        groups.setdefault(key, {"weights": [], "nodes": sorted(joins, key=id), "grads": {}})
        groups[key]["weights"].append(q)
    handles = []
    for group in groups.values():
        for node in group["nodes"]:
            def keep(grad_outputs, node=node, group=group):
                group["grads"][node] = grad_outputs
            handles.append(node.register_prehook(keep))
    try:
        (x.grad,) = torch.autograd.grad(y, [x], g, retain_graph=True)   # W will use the graph
    finally:
        for h in handles:
            h.remove()
    return [(gr["weights"], [(n, gr["grads"][n]) for n in gr["nodes"]]) for gr in groups.values()]


def backward_weight(saved: list) -> None:
    """W: accumulate each weight's gradient, starting from the gradients I kept (one autograd
    call per group, which runs only the weight half of the nodes where the group joins)."""
    for weights, kept in saved:
        edges, grads = [], []
        for node, grad_outputs in kept:
            for i, gr in enumerate(grad_outputs):
                if gr is not None:
                    edges.append(GradientEdge(node, i))
                    grads.append(gr)
        if not edges:
            continue
        # a group that joins at several nodes, one below another: each kept node must see only
        # the gradient I kept for it, not that plus what flows down from a kept node above
        pins = [node.register_prehook(lambda _, kept_grads=gr: kept_grads)
                for node, gr in kept] if len(kept) > 1 else []
        try:
            # retain_graph: another group's call may pass through nodes this one runs; the graph
            # goes when the stage drops its output
            dws = torch.autograd.grad(edges, weights, grads, allow_unused=True, retain_graph=True)
        finally:
            for h in pins:
                h.remove()
        for q, dw in zip(weights, dws):
            if dw is not None:
                q.grad = dw if q.grad is None else q.grad + dw
