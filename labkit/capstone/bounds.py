"""How far the capstone's losses may be from one process's, per step, derived (labkit.numerics),
never tuned. Every scale is read off the one-process reference (`labkit.capstone.reference`:
magnitudes do not depend on the CPU, only the rounding does).

- Gradient: every element is a chain of reductions (labkit.tp.parity.reduction_lengths for the
  blocks, then the head (n_embd), the cross-entropy's log-sum-exp (vocab + 1), the head's
  transpose (vocab), and the sum over the global batch's tokens with the m micro-batches and
  the dp replicas added in another order), summed in another order on the ranks: within
  d = chain_bound(lengths, the largest |grad| of that tensor).
- Norm: | ||g'|| - ||g|| | <= ||g' - g|| <= sqrt(sum over tensors of numel d^2), plus the sum
  of numel squares in another order (fp32 on one process: reorder_bound / (2 norm)): relative
  `rel`.
- Clipped gradient (coefficient c = min(1, max_norm / norm)): c (1 + rel) d + |g| c rel / (1 - rel)
  + 2 u |g| (labkit.nd.clipping's parity_bounds, the same argument).
- Parameters after k SGD steps: the sum of lr times those errors, plus each step's rounding of
  the parameter (2 u (|p| + lr |step|)), element by element (labkit.numerics.sgd_bound's terms).
- Loss at step k: the forward's chain_bound (scale: the largest |activation| or loss) plus, to
  first order, sum_i |g_k,i| |dp_k,i| with the parameters' bound after k steps (|dL| <= sum
  |dL/dp| |dp|). First order throughout: a gradient taken at parameters dp apart also moves by
  the curvature times dp, left out as in sgd_bound (small beside d while lr x curvature < 1
  over these few steps). Measured on this CPU: observed / bound 2e-5 .. 5e-4 for every layout,
  the wrong variants 2.3 .. 4200 (tests/capstone/test_capstone.py prints them).
"""
import math

from labkit.numerics import chain_bound, reorder_bound, unit_roundoff

__all__ = ["loss_bounds", "norm_bound", "ratios", "gradient_lengths", "forward_lengths"]


def _tail(cfg, dp: int) -> list:
    return [cfg.batch * cfg.seq + cfg.microbatches + dp + 1]


def gradient_lengths(cfg, dp: int = 2) -> list:
    from labkit.tp.parity import reduction_lengths
    blocks = reduction_lengths(cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.batch, cfg.seq)[:-1]
    return blocks + [cfg.n_embd, cfg.vocab + 1, cfg.vocab] + _tail(cfg, dp)


def forward_lengths(cfg, dp: int = 2) -> list:
    from labkit.tp.parity import reduction_lengths
    forward = reduction_lengths(1, cfg.n_embd, cfg.n_head, cfg.batch, cfg.seq)[0]
    return [2] + [forward] * cfg.n_layer + [cfg.n_embd, cfg.vocab + 1] + _tail(cfg, dp)


def loss_bounds(cfg, ref: dict, dp: int = 2, pp: int = 2, tp: int = 2) -> list:
    """Per step, the most a dp x pp x tp run's loss may differ from `ref`'s (fp32). pp and tp
    change the order of sums already counted in the lengths (TP's all-reduce of t partial sums
    is a split of the same reduction), so the bound depends on dp through the tail only.
    Element by element: each tensor's gradient within chain_bound(lengths, its largest |grad|)
    (labkit.numerics.one_step_over_bound's scale), the clipped step and the parameters' drift
    per element, and the loss's first-order change sum_i |g_k,i| |dp_k,i|."""
    import torch
    u = unit_roundoff()
    lengths = gradient_lengths(cfg, dp) + [tp]     # sequence parallelism's sum over TP
    drift = [torch.zeros_like(g) for g in ref["grads"][0]]       # |p' - p| per element, bound
    loss_scale = max(ref["activation"], max(ref["losses"]))
    first = chain_bound(forward_lengths(cfg, dp), loss_scale)
    out = []
    for k, (grads, params, norm) in enumerate(zip(ref["grads"], ref["params"], ref["norms"])):
        out.append(first + sum(float((g.abs() * e).sum()) for g, e in zip(grads, drift)))
        d = [chain_bound(lengths, float(g.abs().max())) for g in grads]
        numel = sum(g.numel() for g in grads)
        err = math.sqrt(sum(g.numel() * x * x for g, x in zip(grads, d)))
        rel = (err + reorder_bound(numel, norm ** 2) / (2 * norm)) / norm
        c = min(1.0, cfg.max_norm / norm)
        for e, g, x, p in zip(drift, grads, d, params):
            a = g.abs()
            step = c * rel / (1 - rel) * a + c * (1 + rel) * x + 2 * u * a
            e += cfg.lr * step + 2 * u * (p + cfg.lr * c * a)
    return out


def norm_bound(cfg, ref: dict, dp: int = 2) -> float:
    """The most step 0's gradient norm (before clipping; the same parameters on both sides) may
    differ from `ref`'s, relative: sqrt(sum over tensors of numel d^2) plus the norm's own
    sum of squares in another order, over the norm. A gradient summed instead of averaged over
    DP, or a replica counted twice, moves it far more; clipping hides the former from the loss."""
    grads, norm = ref["grads"][0], ref["norms"][0]
    lengths = gradient_lengths(cfg, dp)
    err = math.sqrt(sum(g.numel() * chain_bound(lengths, float(g.abs().max())) ** 2 for g in grads))
    numel = sum(g.numel() for g in grads)
    return (err + reorder_bound(numel, norm ** 2) / (2 * norm)) / norm


def ratios(observed: list, bounds: list) -> list:
    """|observed difference| / bound per step (<= 1 passes)."""
    return [o / b for o, b in zip(observed, bounds)]
