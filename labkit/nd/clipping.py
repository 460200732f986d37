"""Gradient clipping when the gradients are spread over data, tensor and pipeline parallelism.

    norm = global_grad_norm(shards, weights, groups)       # the norm one process would compute
    cluster.run(clip_parity, dp=2, tp=2)                   # the right norm and the wrong ones (nd/parity.py)

Clipping scales every gradient by max_norm / ||g||, where ||g|| is the norm of ALL the model's
gradients. On a 3-D layout no rank holds them all:
- DP with ZeRO-2/3 or FSDP: each data-parallel rank holds a different shard of the (averaged)
  gradient: the squares are summed over the DP group. (Plain DDP keeps whole copies: no sum.)
- TP: a split weight (column / row parallel) is in pieces on the TP ranks: summed over TP. A
  replicated one (layer norms, the row-parallel bias) is the same on every TP rank: counted on
  one TP rank only (Megatron-LM's `param_is_not_tensor_parallel_duplicate`).
- PP: each stage holds different layers: summed over the PP group. A weight tied across stages
  (the input embedding on the first stage and the output layer on the last) is on both after
  their gradients are summed over the embedding group: counted on the first stage only
  (Megatron-LM's `param_is_not_shared`; `tied_parity`).
- EP: each expert-parallel rank holds other experts, so the experts' squares are summed over the
  EP group; the router and the attention (dense) weights are the same on every EP rank after
  their reduction and are counted on one EP rank only (`clip_parity_ep`).
- CP: context-parallel ranks compute gradients from their own positions, but after the CP
  reduction (an all-reduce over the CP group, as DP's) every CP rank holds the same full
  gradient: replicas, NOT summed. Summing over CP, the natural guess since each rank saw only
  s/N positions, makes the norm sqrt(N) times too large.
One all-reduce of one number per dimension. Leave one out and the norm is wrong by the part it
misses; count the replicas on each TP rank and they weigh t times.

Here: the norm (`global_grad_norm`), which elements a rank counts (a TP replica once: `labkit.tp.layers.mark_replicated`), the
mistakes' names (`WRONG*`) and the derived bounds a run against one process is judged by
(`parity_bounds`, `ep_bounds`, `tied_bounds`). The runs are `labkit.nd.parity`'s, the picture
`labkit.nd.plots.norms_figure`.
"""
import torch
import torch.distributed as dist

from labkit.i18n import N_

WRONG = (N_("no DP sum"), N_("no TP sum"), N_("no PP sum"), N_("replicas counted t times"))
WRONG_EP = (N_("no EP sum"), N_("dense counted on every EP rank"), N_("summed over CP"))
WRONG_TIED = (N_("tied embedding counted twice"),)
SUMMED = ("dp", "tp", "pp", "ep")          # never "cp": CP ranks hold replicas once reduced


def global_grad_norm(shard: torch.Tensor, weight: torch.Tensor, groups: dict, skip=()) -> torch.Tensor:
    """sqrt of sum(shard^2 * weight) summed over the 'dp', 'tp', 'pp' and 'ep' groups (skip:
    names of groups not to sum over, to see a wrong norm). `weight` is 1 where this rank counts
    an element and 0 where another rank of the group counts the same replicated element (a TP
    replica, a dense weight on an EP rank other than the first, a tied copy on the last stage).
    A 'cp' group, if given, is not summed over: after the CP reduction its ranks hold replicas."""
    sq = (shard.double() ** 2 * weight).sum()
    for d in SUMMED:
        if d not in skip and groups.get(d) is not None:
            dist.all_reduce(sq, group=groups[d])
    return sq.sqrt()



def parity_bounds(norm: float, numel: int, n_layer=2, n_embd=32, n_head=4, b=4, s=8, dp=2) -> dict:
    """How far `clip_parity`'s results may be from one process on any CPU (fp32), derived
    (labkit.numerics), never tuned:

    - each gradient element within d = chain_bound(the TP blocks' reductions, labkit.tp.parity.
      tolerance's, + the DP reduce-scatter's dp terms and its division, SCALE);
    - the norm: | ||g'|| - ||g|| | <= ||g' - g|| <= d sqrt(numel) (triangle inequality), plus
      the sum of numel squares in float64 in another order (reorder_bound; the root halves its
      relative error): "norm", relative to `norm`;
    - the clipped gradient g' c' against g c (c = max_norm / norm = 1/2 here): at most
      c' d + |g| |c' - c|, |g| <= SCALE, |c' - c| <= c rel / (1 - rel), plus a rounding of each:
      "clipped", absolute."""
    from labkit.numerics import chain_bound
    from labkit.tp.parity import SCALE, reduction_lengths
    d = chain_bound(reduction_lengths(n_layer, n_embd, n_head, b, s) + [dp + 1], SCALE)
    return _norm_bounds(d, norm, numel, SCALE)


def _norm_bounds(d: float, norm: float, numel: int, scale: float, c: float = 0.5) -> dict:
    """From d, the most a gradient element may be off, the bounds of `parity_bounds`' docstring:
    the norm relative to `norm` (numel elements), the clipped gradient at c = max_norm / norm
    absolute (|g| <= scale)."""
    import math
    from labkit.numerics import reorder_bound, unit_roundoff
    rel = (d * math.sqrt(numel) + reorder_bound(numel, norm ** 2, "float64") / (2 * norm)) / norm
    clipped = c * (1 + rel) * d + scale * c * rel / (1 - rel) + 2 * unit_roundoff() * scale
    return {"gradient": d, "norm": rel, "clipped": clipped}


def ep_bounds(norm: float, numel: int, scale: float, cp=1, seq=16, hidden=16, heads=2, experts=4, k=2,
              world=4) -> dict:
    """`parity_bounds` for `clip_parity_ep` (fp32, derived: labkit.numerics.chain_bound), the
    gradient's reductions: the attention's forward (qkv over hidden, scores over head_dim, the
    softmax and the output over seq + the ring's cp chunks, proj over hidden, the residual),
    the MoE layer's chain as labkit.moe.parity.tolerance (router, softmax over experts, fc1,
    fc2, the top-k sum, and their backward), the attention's backward (proj's and qkv's
    transposes, dv, dP, the row term, dq and dk, the ring's cp + 1), each weight gradient's sum
    over the (world / cp) x seq tokens, the all-reduce over `world` ranks and its division.
    `scale`: the largest value one process computes (`clip_parity_ep`'s "largest value"; the
    magnitudes do not depend on the CPU). `numel`: every element a norm adds (the dense ones
    twice for the mistake that counts them on each EP rank)."""
    from labkit.numerics import chain_bound
    d_head, ffn, tokens = hidden // heads, 2 * hidden, (world // cp) * seq
    lengths = ([hidden, d_head, seq + cp, seq, hidden, 2]
               + [hidden, experts, hidden, ffn, k, k, hidden, ffn, experts, k + 2, 2 * experts]
               + [hidden, 2, seq, d_head, d_head, seq, seq, cp + 1, 3 * hidden]
               + [tokens, world + 1])
    return _norm_bounds(chain_bound(lengths, scale), norm, numel, scale)


def tied_bounds(norm: float, numel: int, scale: float, vocab=24, hidden=16, b=4, s=6) -> dict:
    """`parity_bounds` for `tied_parity` (fp32, derived): forward l0 and l1 (hidden each), the
    logits h E^T (hidden), the cross-entropy's log-sum-exp (vocab + 1), the loss's sum over the
    b s tokens; backward the logits' transpose (vocab), l1's and l0's (hidden each), each weight
    gradient's sum over b s tokens (E's from both uses: + 2), the embedding group's sum (2), the
    DP all-reduce and its division (3). `scale`: the largest value one process computes
    (`tied_parity`'s "largest value")."""
    from labkit.numerics import chain_bound
    lengths = [hidden, hidden, hidden, vocab + 1, b * s, vocab, hidden, hidden, b * s + 2, 2, 3]
    return _norm_bounds(chain_bound(lengths, scale), norm, numel, scale)
