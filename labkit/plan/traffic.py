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
  all-gathers twice and reduce-scatters once per micro-batch (3 m (d-1)/d).
"""
from dataclasses import dataclass

from labkit.parallel_dims import Layout


@dataclass(frozen=True)
class Traffic:
    """Bytes sent by one GPU in one step, per dimension, and how many collective calls."""
    tp: float
    pp: float
    dp: float
    calls: dict             # dim -> collective calls (or sends) per step

    def ranked(self) -> list:
        """[(dim, bytes)] largest first."""
        return sorted((("tp", self.tp), ("pp", self.pp), ("dp", self.dp)), key=lambda x: -x[1])

    @property
    def total(self) -> float:
        return self.tp + self.pp + self.dp


def step_traffic(layout: Layout, *, n_params: float, layers: int, hidden: int, seq: int,
                 micro_batch: int = 1, micro_batches: int = 1, bytes_per_value: int = 2,
                 zero_stage: int = 0, recompute: bool = False) -> Traffic:
    """Bytes one GPU sends per step along TP, PP and DP (busiest GPU of each dimension).

    micro_batches: micro-batches per step on each pipeline (gradient accumulation steps).
    """
    t, p, d = layout.tp, layout.pp, layout.dp
    act = micro_batch * seq * hidden * bytes_per_value          # one activation tensor, bytes
    per_layer = (6 if recompute else 4) * micro_batches
    tp = (layers / p) * per_layer * 2 * (t - 1) / t * act
    pp_sends = 0 if p == 1 else (1 if p == 2 else 2) * micro_batches
    pp = pp_sends * act
    grads = n_params / (t * p) * bytes_per_value                 # this GPU's gradient bytes
    m = micro_batches
    passes = {0: 2, 1: 2, 2: m + 1, 3: 3 * m}[zero_stage]       # (d-1)/d S each
    dp = passes * (d - 1) / d * grads
    calls = {"tp": int(layers / p * per_layer) if t > 1 else 0, "pp": pp_sends,
             "dp": {0: 1, 1: 2, 2: m + 1, 3: 3 * m}[zero_stage] if d > 1 else 0}
    return Traffic(tp=tp, pp=pp, dp=dp, calls=calls)


def link_times(traffic: Traffic, layout: Layout, intra_gbps: float, inter_gbps: float,
               slow: tuple = None) -> dict:
    """Seconds per step each dimension spends on the wire, from link bandwidths in GB/s
    (per GPU, one direction): a dimension whose groups cross nodes runs at `inter_gbps`.
    `slow` names the dimensions to put on the slow link regardless (e.g. ("tp",) to see what
    TP across nodes would cost)."""
    slow = tuple(d for d in ("tp", "pp", "dp") if layout.spans_nodes(d)) if slow is None else slow
    out = {}
    for dim in ("tp", "pp", "dp"):
        bw = inter_gbps if dim in slow else intra_gbps
        out[dim] = getattr(traffic, dim) / (bw * 1e9)
    return out


def ranking_sentence(traffic: Traffic) -> str:
    """'TP > DP > PP (notes: TP > PP > DP; holds / differs here)'."""
    order = [d for d, _ in traffic.ranked()]
    holds = order == ["tp", "pp", "dp"]
    return (" > ".join(d.upper() for d in order) + " by bytes per GPU; the notes' TP > PP > DP "
            + ("holds here" if holds else "does not hold here (by calls per step DP is still fewest)"))
