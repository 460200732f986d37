"""What a split backward costs against a fused one, on one stage in this process (layer 4).

    c = backward_cost(layers=4, width=512, rows=256)
    c["B"], c["I + W"], c["I + W, naive W"]   # calls, nodes, flops, seconds per variant
    c["ratio"]                                 # (I + W) / B per run: median, min, max

Three ways to get a middle stage's input and weight gradients from its output gradient:

- "B": one fused backward (1F1B);
- "I + W": ZB-H1's halves as the executor runs them (`labkit.pipeline.backward`): I keeps each
  layer's gradient, W computes weight gradients only from those;
- "I + W, naive W": W as `autograd.backward(y, g, inputs=weights)`, which starts again from
  the stage's output and recomputes the activation-gradient chain.

Counts are exact and do not depend on the machine's load: autograd calls, autograd nodes
evaluated (AccumulateGrad not counted: `autograd.grad` hands gradients back instead of
accumulating them), and matrix-multiply FLOPs (2 x m x k x n per mm/addmm dispatched). Times are
the fastest of `repeats` backwards per run (other programs only ever add time), the three
variants taking turns within each run, on one thread; the ratio's spread is over the runs.
"""
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from labkit.pipeline.backward import backward_input, backward_weight
from labkit.pipeline.toy_mlp import mlp

__all__ = ["backward_cost", "VARIANTS"]

VARIANTS = ("B", "I + W", "I + W, naive W")


class _MatmulFlops(TorchDispatchMode):
    """Counts 2*m*k*n for every mm and addmm that runs (the backward's matrix products)."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("mm", "addmm"):
            a, b = args[-2], args[-1]
            self.flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        return out


def _stage(layers, width, rows, seed):
    model = mlp(layers, width, seed=seed, frozen=None)
    g = torch.Generator().manual_seed(seed + 1)          # one process on this machine's CPU, as mlp()
    x = torch.randn(rows, width, generator=g, device="cpu").requires_grad_(True)
    return model, x, torch.randn(rows, width, generator=g, device="cpu")


def _run(variant, model, x, gy, calls):
    """One forward (not timed), then the variant's backward; returns its seconds."""
    weights = list(model.parameters())
    for q in weights:
        q.grad = None
    x.grad = None
    y = model(x)
    grad, back = torch.autograd.grad, torch.autograd.backward

    def counted(fn):
        def call(*a, **k):
            calls[0] += 1
            return fn(*a, **k)
        return call
    torch.autograd.grad, torch.autograd.backward = counted(grad), counted(back)
    try:
        t0 = time.perf_counter()
        _run_graph(variant, model, x, gy, y)
        return time.perf_counter() - t0
    finally:
        torch.autograd.grad, torch.autograd.backward = grad, back


def _nodes(variant, model, x, gy) -> int:
    """Autograd nodes evaluated by one backward of `variant` (AccumulateGrad not counted)."""
    count = [0]
    hooks = []
    y = model(x)
    todo, seen = [y.grad_fn], {y.grad_fn}
    while todo:
        node = todo.pop()
        if type(node).__name__ != "AccumulateGrad":
            hooks.append(node.register_hook(lambda *_: count.__setitem__(0, count[0] + 1)))
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)
    try:
        _run_graph(variant, model, x, gy, y)
    finally:
        for h in hooks:
            h.remove()
    return count[0]


def _run_graph(variant, model, x, gy, y):
    weights = list(model.parameters())
    if variant == "B":
        torch.autograd.backward(y, gy, inputs=weights + [x])
    elif variant == "I + W":
        backward_weight(backward_input(y, gy, x, weights))
    else:
        torch.autograd.backward(y, gy, inputs=[x], retain_graph=True)
        torch.autograd.backward(y, gy, inputs=weights)


def backward_cost(layers: int = 4, width: int = 512, rows: int = 256, runs: int = 7, repeats: int = 10,
                  seed: int = 0) -> dict:
    """Calls, nodes, FLOPs and seconds of each variant's backward on one stage of `layers`
    blocks (mlp(layers, width), every layer training) for `rows` rows; the gradients of the
    three variants are checked equal. Returns {variant: {...}, "ratio": {...}, "shape": {...}}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(layers, width, rows, runs, repeats, seed)
    finally:
        torch.set_num_threads(threads)


def _measure(layers, width, rows, runs, repeats, seed) -> dict:
    model, x, gy = _stage(layers, width, rows, seed)
    out = {"shape": {"layers": layers, "width": width, "rows": rows, "runs": runs, "repeats": repeats}}
    grads = {}
    for v in VARIANTS:
        calls = [0]
        _run(v, model, x, gy, calls)
        grads[v] = [q.grad.clone() for q in model.parameters()] + [x.grad.clone()]
        y = model(x)
        with _MatmulFlops() as fc:
            _run_graph(v, model, x, gy, y)
        out[v] = {"calls": calls[0], "nodes": _nodes(v, model, x, gy), "flops": fc.flops, "seconds": []}
    out["max_grad_diff"] = max(float((a - b).abs().max()) for v in VARIANTS[1:]
                               for a, b in zip(grads["B"], grads[v]))
    for _ in range(runs):
        per = {v: [] for v in VARIANTS}
        for _ in range(repeats):
            for v in VARIANTS:
                per[v].append(_run(v, model, x, gy, [0]))
        for v in VARIANTS:
            out[v]["seconds"].append(min(per[v]))
    for name, v in (("ratio", "I + W"), ("ratio_naive", "I + W, naive W")):
        r = [a / b for a, b in zip(out[v]["seconds"], out["B"]["seconds"])]
        out[name] = {"median": statistics.median(r), "min": min(r), "max": max(r), "runs": r}
    return out
