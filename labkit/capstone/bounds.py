"""How far a capstone run's loss may be from one process's at each step, derived from fp32's
rounding and the reduction lengths (labkit.numerics), never tuned (layer 1: pure).

A layout computes the same sums in other orders: the batch split over DP and micro-batches,
the sequence over CP (the ring's online-softmax merge adds cp + 1 terms), TP's partial sums
added by an all-reduce, the gradient averaged over DP x CP. So:

1. Gradient error (per element): `chain_bound` over the forward and backward reduction lengths
   (`lengths`), scale = the largest |gradient| entry of the reference.
2. Clipping by the global norm: the norm of numel squares is off by gamma_(numel + tp + pp)
   relatively plus sqrt(numel) d / ||g|| from the gradients' own error d; the clipped gradient
   c g (c <= 1) is then off by c (d + |g| delta_c) <= d + G delta_c.
3. Parameters after t SGD steps: `sgd_bound` of that error (|p| below the reference's largest).
4. The loss at step t: the forward chain's reordering (scale: the loss) plus, to first order,
   the parameter error times the reference gradient's L1 norm (|dL| <= sum |g_i| |dp_i|).
"""
from labkit.numerics import chain_bound, gamma, sgd_bound


def lengths(cfg, layout: dict, backward: bool = True) -> list:
    """The reductions along one step's chain. Per block forward: ln1 (d), qkv (d), the scores
    (head_dim), the softmax (seq + the CP ring's cp + 1 merges), the weighted values (seq), proj
    (d, + tp for TP's all-reduce), the residual (2), ln2 (d), fc (d), fc_out (4 d + tp), the
    residual (2); then ln_f (d), the head (d), the log-sum-exp (vocab + 1) and the mean over
    the batch's tokens with the micro-batch and DP x CP sums (batch x seq + m + dp x cp).
    Backward: the same lengths transposed (qkv's and fc's input gradients over 3 d and 4 d +
    tp) and every weight gradient's sum over the batch's positions, micro-batches and DP x CP."""
    d, s, V = cfg.n_embd, cfg.seq, cfg.vocab
    tp, cp, dp = layout.get("tp", 1), layout.get("cp", 1), layout.get("dp", 1)
    m = cfg.microbatches if layout.get("pp", 1) > 1 else 1
    hd = d // cfg.n_head
    tokens = cfg.batch * s + m + dp * cp
    block = [d, d, hd, s + cp + 1, s, d + tp, 2, d, d, 4 * d + tp, 2]
    fwd = block * cfg.n_layer + [d, d, V + 1, tokens]
    if not backward:
        return fwd
    bblock = [d, 4 * d + tp, d, d, 2, s, hd, s + cp + 1, s, 3 * d + tp, d, 2]
    return fwd + [V, d] + bblock * cfg.n_layer + [tokens]


def loss_bounds(cfg, layout: dict, ref: dict, dtype="float32") -> list:
    """The bound on |loss(layout) - loss(one process)| at each step of `ref` (reference())."""
    tp, pp = layout.get("tp", 1), layout.get("pp", 1)
    G = max(ref["grad_max"])
    d = chain_bound(lengths(cfg, layout), G, dtype)
    if cfg.max_norm is not None:
        n = ref["numel"]
        delta_c = gamma(n + tp + pp, dtype) + n ** 0.5 * d / min(ref["norms"])
        d = d + G * delta_c
    P = max(ref["param_max"]) + cfg.lr * G
    out = []
    for t, loss in enumerate(ref["losses"]):
        fwd = chain_bound(lengths(cfg, layout, backward=False), abs(loss), dtype)
        dp_err = sgd_bound(d, cfg.lr, t, param_scale=P, dtype=dtype) if t else 0.0
        out.append(fwd + ref["grad_l1"][t] * dp_err)
    return out


def worst_ratio(got: list, want: list, bounds: list) -> float:
    """max over steps of |got - want| / bound (<= 1: equal to one process)."""
    if len(got) != len(want):
        raise ValueError(f"{len(got)} losses against {len(want)} reference losses")
    return max(abs(g - w) / b for g, w, b in zip(got, want, bounds))
