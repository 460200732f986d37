"""Bytes each GPU sends per training step, per parallel dimension (layer 1: pure arithmetic).

Ring collectives (Thakur, Rabenseifner, Gropp 2005): an all-reduce of S bytes over n ranks
sends 2 (n-1)/n S per rank, a reduce-scatter or an all-gather (n-1)/n S.

- TP (Megatron-LM, arXiv 1909.08053, figure 4): per layer and micro-batch, two all-reduces of
  the activations (b s h values) in forward and two in backward - four in all (the notes'
  "two per layer" counts the forward only). Full recomputation repeats the forward's two.
  Sequence parallelism swaps each all-reduce for a reduce-scatter + all-gather: same bytes.
- PP: each micro-batch's activations go to the next stage in forward and their gradient comes
  back in backward (b s h values each way); a middle stage sends both, an end stage one.
- DP: the gradients of the parameters this GPU holds (params / (tp pp)) are all-reduced once
  per step (DDP, ZeRO-1: 2 (d-1)/d, with `no_sync` over the micro-batches), ZeRO-2 reduce-scatters
  every micro-batch and all-gathers the updated parameters once ((m + 1) (d-1)/d), ZeRO-3 / FSDP
  all-gathers twice and reduce-scatters once per micro-batch (3 m (d-1)/d). The CP ranks hold
  the same weights, so the gradients are reduced over CP x DP ranks (Megatron-core's data-parallel
  group "with context parallelism"); the experts' gradients only over their EDP replicas.
- CP (`labkit.cp.formulas.wire`): per layer and micro-batch, ring attention passes the K/V
  blocks around the CP ring in forward, and K/V plus their gradients in backward; all-gather
  attention gathers K/V once and reduce-scatters their gradients. K/V have h_kv heads (split by
  TP) of size h / a. Every activation tensor elsewhere (TP, PP) is 1 / CP as long.
- EP (`labkit.moe.formulas.uniform_dispatch_bytes`, balanced routing): per MoE layer and
  micro-batch, the tokens this rank holds (b s / (CP TP) with sequence parallelism) go to their
  k experts and come back: dispatch + combine in forward, the same two in backward (4 all-to-alls).
  Full recomputation repeats the forward's two.
"""
from dataclasses import dataclass

from labkit.cp.formulas import wire
from labkit.i18n import tr
from labkit.moe.formulas import uniform_dispatch_bytes
from labkit.nd.layout import Layout

DIMS = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class Traffic:
    """Bytes sent by one GPU in one step, per dimension, and how many collective calls."""
    tp: float
    pp: float
    dp: float
    calls: dict             # dim -> collective calls (or sends) per step
    cp: float = 0.0
    ep: float = 0.0

    def ranked(self) -> list:
        """[(dim, bytes)] largest first (cp and ep only when they move bytes)."""
        dims = [d for d in DIMS if d in ("tp", "pp", "dp") or getattr(self, d)]
        return sorted(((d, getattr(self, d)) for d in dims), key=lambda x: -x[1])

    @property
    def total(self) -> float:
        return self.tp + self.pp + self.dp + self.cp + self.ep


def step_traffic(layout: Layout, *, n_params: float, layers: int, hidden: int, seq: int,
                 micro_batch: int = 1, micro_batches: int = 1, bytes_per_value: int = 2,
                 zero_stage: int = 0, recompute: bool = False, heads: int = None,
                 kv_heads: int = None, cp_method: str = "ring", expert_params: float = 0.0,
                 top_k: int = 0) -> Traffic:
    """Bytes one GPU sends per step along TP, PP, DP, CP and EP (busiest GPU of each dimension).

    micro_batches: micro-batches per step on each pipeline (gradient accumulation steps).
    heads, kv_heads: attention heads (needed when layout.cp > 1; kv_heads defaults to heads).
    expert_params, top_k: the parameters in experts (of n_params) and experts per token (MoE).
    """
    t, p, c, e = layout.tp, layout.pp, layout.cp, layout.ep
    d = layout.dp * c                                           # ranks holding the same weights
    act = micro_batch * seq // c * hidden * bytes_per_value     # one activation tensor, bytes
    per_layer = (6 if recompute else 4) * micro_batches
    tp = (layers / p) * per_layer * 2 * (t - 1) / t * act
    pp_sends = 0 if p == 1 else (1 if p == 2 else 2) * micro_batches
    pp = pp_sends * act
    m = micro_batches
    passes = {0: 2, 1: 2, 2: m + 1, 3: 3 * m}[zero_stage]       # (d-1)/d S each
    dense = (n_params - expert_params) / (t * p) * bytes_per_value   # this GPU's gradient bytes
    experts = expert_params / (t * p * e) * bytes_per_value
    edp = layout.edp
    dp = passes * ((d - 1) / d * dense + (edp - 1) / edp * experts)
    cp = 0.0
    if c > 1:
        if heads is None:
            raise ValueError(tr("cp {c} > 1: give heads (and kv_heads) so the K/V blocks can be sized", c=c))
        kv = max(1.0, (kv_heads or heads) / t)            # Megatron copies K/V heads when t > h_kv
        w = wire(seq, c, 0, method=cp_method, batch=micro_batch, kv_heads=kv,
                 head_dim=hidden // heads, itemsize=bytes_per_value, layout="zigzag")
        per = w["forward"]["payload"] * (2 if recompute else 1) + w["backward"]["payload"]
        cp = layers / p * m * per
    ep = 0.0
    if e > 1:
        one = uniform_dispatch_bytes(micro_batch * seq / (c * t), hidden, top_k, e, bytes_per_value)
        ep = layers / p * m * (6 if recompute else 4) * one
    calls = {"tp": int(layers / p * per_layer) if t > 1 else 0, "pp": pp_sends,
             "dp": {0: 1, 1: 2, 2: m + 1, 3: 3 * m}[zero_stage] if d > 1 or edp > 1 else 0,
             "cp": int(layers / p * m * (2 if cp_method == "allgather" else 2 * c - 1)) if c > 1 else 0,
             "ep": int(layers / p * m * (6 if recompute else 4)) if e > 1 else 0}
    return Traffic(tp=tp, pp=pp, dp=dp, calls=calls, cp=cp, ep=ep)


def link_times(traffic: Traffic, layout: Layout, intra_gbps: float, inter_gbps: float,
               slow: tuple = None) -> dict:
    """Seconds per step each dimension spends on the wire, from link bandwidths in GB/s
    (per GPU, one direction): a dimension whose groups cross nodes runs at `inter_gbps`.
    `slow` names the dimensions to put on the slow link regardless (e.g. ("tp",) to see what
    TP across nodes would cost)."""
    slow = tuple(d for d in DIMS if layout.spans_nodes(d)) if slow is None else slow
    out = {}
    for dim in DIMS:
        bw = inter_gbps if dim in slow else intra_gbps
        out[dim] = getattr(traffic, dim) / (bw * 1e9)
    return out


def ranking_sentence(traffic: Traffic) -> str:
    """'TP > DP > PP (notes: TP > PP > DP; holds / differs here)'."""
    order = [d for d, _ in traffic.ranked()]
    holds = order == ["tp", "pp", "dp"]
    ranked = " > ".join(d.upper() for d in order)
    return (tr("{ranked} by bytes per GPU; the notes' TP > PP > DP holds here", ranked=ranked) if holds
            else tr("{ranked} by bytes per GPU; the notes' TP > PP > DP does not hold here (by calls "
                    "per step DP is still fewest)", ranked=ranked))
