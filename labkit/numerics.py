"""How far a distributed result may be from one process, derived, never tuned (layer 1, pure).

N ranks compute the same sums as one process, in another order: each rank sums its slice of the
batch and a collective adds the N partial sums; torch's kernels also block a reduction
differently for another batch size and on another CPU (`ATEN_CPU_CAPABILITY`: default, avx2,
avx512). Floating-point addition is not associative, so the two results differ, by at most
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 4.4 and Lemma 3.1):

    |fl(x_1 + ... + x_n) - (x_1 + ... + x_n)| <= gamma_n * (|x_1| + ... + |x_n|),
    gamma_n = n u / (1 - n u),   u = eps / 2 (the unit roundoff of the dtype)

whatever the order, so two orders differ by at most twice that (`reorder_bound`). A bound
derived this way holds on every kernel; one read off what a CPU printed holds on that CPU only.

The optimizer carries the difference into the parameters:

- SGD moves a parameter by -lr g: gradients within d give parameters within lr d per step, plus
  the rounding of the parameter itself (`sgd_bound`).
- Adam's first step moves it by -lr g / (|g| + eps_adam) (bias correction makes m = g and
  v = g^2): about lr whatever the size of g. Where |g| is far above the gradient's error d the
  step barely depends on g; where |g| is within d of zero, the two runs may step in opposite
  directions, 2 lr apart. `adam_step_bound` gives each element its own bound from the reference
  gradient: lr (f(|g| + d) - f(|g| - d)) with f(x) = x / (|x| + eps_adam), the widest the step
  can vary for a gradient anywhere in [g - d, g + d]. A gradient left unaveraged, an Adam step
  skipped or a shard off by one still fails: those move elements whose |g| is far above d.

Pure: no torch import. The functions take floats, or torch tensors through their methods.
"""

_EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}


def _name(dtype) -> str:
    name = str(dtype).replace("torch.", "")
    name = {"float": "float32", "double": "float64", "half": "float16"}.get(name, name)
    if name not in _EPS:
        raise ValueError(f"dtype must be one of {sorted(_EPS)}, got {dtype!r}")
    return name


def unit_roundoff(dtype="float32") -> float:
    """u = eps / 2: the largest relative error of one rounding to `dtype`."""
    return _EPS[_name(dtype)] / 2


def gamma(n: int, dtype="float32") -> float:
    """gamma_n = n u / (1 - n u): a sum of n terms in `dtype` is off by at most gamma_n times
    the sum of the terms' magnitudes, in any order."""
    nu = max(int(n), 1) * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"a reduction of {n} terms in {_name(dtype)} has no error bound (n u >= 1)")
    return nu / (1 - nu)


def reorder_bound(length: int, scale: float, dtype="float32") -> float:
    """The most two evaluations of one reduction of `length` terms may differ by when they add
    the terms in different orders (split over ranks, blocked otherwise by another kernel):
    2 gamma_length scale, where `scale` stands for the sum of the terms' magnitudes. Callers
    pass the largest magnitude of the result (the terms of a gradient or an output have the
    result's size or less and partly cancel) and say so."""
    return 2 * gamma(length, dtype) * scale


def chain_bound(lengths, scale: float, dtype="float32") -> float:
    """A result computed through a chain of reductions (a forward and backward pass: each
    matmul, norm and softmax sums over its length), two ways: to first order the relative
    errors of the links add, and gamma_a + gamma_b <= gamma_(a+b), so the two results differ by
    at most reorder_bound(sum(lengths), scale). `scale`: at least the largest magnitude the
    chain computes (callers check it on one process: magnitudes do not depend on the CPU)."""
    return reorder_bound(sum(lengths), scale, dtype)


def sgd_bound(grad_error: float, lr: float, steps: int = 1, param_scale: float = 1.0,
              dtype="float32", momentum: float = 0.0, grad_scale: float = 0.0) -> float:
    """Parameters after `steps` SGD steps (-lr b, b = momentum b + g) from the same start, with
    gradients that differ by at most `grad_error` per step: the buffers differ by
    e_t = momentum e_(t-1) + grad_error (+ u |b|, |b| <= grad_scale / (1 - momentum)), the
    parameters by the sum of lr e_t, plus each step's rounding of the parameter on both sides
    (2 u |p|, |p| <= param_scale). To first order: the gradients are also taken at parameters
    this far apart, which moves them by the curvature times it, small beside grad_error while
    lr times the curvature stays below 1 over a few steps."""
    u = unit_roundoff(dtype)
    buffer = grad_scale / (1 - momentum) if momentum else grad_scale
    e = total = 0.0
    for _ in range(steps):
        e = momentum * e + grad_error + (u * buffer if momentum else 0.0)
        total += lr * e + 2 * u * param_scale + u * lr * buffer
    return total


def adam_step_bound(grad, grad_error, lr: float, param, adam_eps: float = 1e-8, dtype="float32"):
    """Element by element, how far one Adam step from fresh state (torch.optim.Adam's defaults)
    may take the same parameter `param` in two runs whose gradients differ by at most
    `grad_error` from the reference gradient `grad`:

        lr (f(|g| + d) - f(|g| - d)) + 2 u (|p| + lr) + 16 u lr,   f(x) = x / (|x| + eps_adam)

    f is increasing, so f(|g| + d) - f(|g| - d) bounds |f(g') - f(g)| for every g' within d of g
    (nearly 2 where |g| < d: the sign may flip; about 2 d eps_adam / g^2 where |g| >> d).
    2 u (|p| + lr): each run rounds its new parameter, within lr of `param`, once; 16 u lr: the
    roundings inside each run's step (moments, square root, bias corrections, division: at
    most 8 relative u each). `grad` and `param` are tensors (or floats) of the same shape."""
    u = unit_roundoff(dtype)
    a = abs(grad)

    def f(x):
        return x / (abs(x) + adam_eps)
    return lr * (f(a + grad_error) - f(a - grad_error)) + 2 * u * (abs(param) + lr) + 16 * u * lr


def one_step_over_bound(got: dict, want: dict, grads: dict, length: int, lr: float,
                        optimizer: str = "adam", dtype="float32") -> float:
    """The worst element of `got` (a distributed run's parameters after one optimizer step)
    against `want` (one process's), as a fraction of its bound: <= 1 passes, and it fails
    by a factor of 100 or more for a gradient left unaveraged, a step skipped or a batch shard
    off by one (tests/fsdp/test_fsdp.py). `grads`: the reference's gradients by name (zeros for a
    tensor without one). Each gradient is a sum over the batch's `length` tokens, added in
    another order on the ranks (per rank, then the reduce-scatter or all-reduce), so it is
    within reorder_bound(length, s) of the reference's, with s the largest |gradient| of that
    tensor standing for the terms' sizes (measured: the gradients differ by 2e-7 s, the bound
    is 3e-5 s for 256 tokens). One step of `optimizer` ('adam' or 'sgd') carries that into the
    parameter: adam_step_bound element by element, or sgd_bound with the tensor's largest |p|."""
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    worst = 0.0
    for k, v in want.items():
        g = grads[k]
        d = reorder_bound(length, g.abs().max().item(), dtype)
        if optimizer == "adam":
            bound = adam_step_bound(g, d, lr, v, dtype=dtype)
        else:
            bound = sgd_bound(d, lr, 1, v.abs().max().item() + lr * g.abs().max().item(), dtype)
        worst = max(worst, ((got[k] - v).abs() / bound).max().item())
    return worst
