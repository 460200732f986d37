"""FSDP's sharding strategies as data, and the bytes each moves per step (layer 1: pure).

The notes' FSDP1 names, their FSDP2 form and the ZeRO stage each equals:

    FULL_SHARD      fully_shard(reshard_after_forward=True)        ZeRO-3
    SHARD_GRAD_OP   fully_shard(reshard_after_forward=False)       ZeRO-2 (between forward and backward
                                                                   it holds full parameters, so ZeRO-3's
                                                                   saving returns only after backward)
    NO_SHARD        fully_shard on a (N, 1) mesh: replicate only   DDP
    HYBRID_SHARD    fully_shard on a (replicas, shard) 2-D mesh    ZeRO-3 inside a shard group, DDP across

Bytes per step, per rank, for an FSDP group of S bytes sharded over N ranks (one forward and
one backward, no gradient accumulation). On NCCL (ring algorithms, Thakur et al. 2005):
all-gather and reduce-scatter send (N-1)/N x S, all-reduce 2(N-1)/N x S, so FULL_SHARD moves 3Ψ
and SHARD_GRAD_OP 2Ψ when N is large (the ZeRO paper's section 7). On gloo, torch's
reduce-scatter reduces the whole tensor and then keeps a slice: it sends as much as an
all-reduce, 2(N-1)/N x S (measured with labkit.comm.traffic), so FSDP on gloo moves more.
"""
from dataclasses import dataclass

from labkit.i18n import N_


@dataclass(frozen=True)
class Strategy:
    name: str                      # FSDP2 form, as labkit.fsdp.shard(strategy=...) spells it
    fsdp1: str                     # torch.distributed.fsdp.ShardingStrategy member
    reshard_after_forward: bool
    zero_stage: int                # what it equals in ZeRO terms (memory after backward)
    fsdp2: str                     # how FSDP2 writes it
    about: str                     # what it means, in English (the key of its translation)

    @property
    def note(self) -> str:
        """What it means, in the learner's language (labkit.i18n): the text a table shows."""
        from labkit.i18n import tr
        return tr(self.about)


# the granularities labkit.fsdp.shard(wrap=...) takes: one unit for the whole model, one per
# transformer block, one per nn.Linear (data, so the checker validates a choice without FSDP)
WRAPS = ("model", "block", "linear")

STRATEGIES = {
    "full": Strategy("full", "FULL_SHARD", True, 3, "fully_shard(m, mesh=1-D mesh)",
                     N_("parameters, gradients and optimizer state sharded; parameters gathered "
                        "for forward and again for backward")),
    "grad_op": Strategy("grad_op", "SHARD_GRAD_OP", False, 2,
                        "fully_shard(m, mesh=1-D mesh, reshard_after_forward=False)",
                        N_("full parameters kept from forward to the end of backward: one all-gather "
                           "per step; ZeRO-2's memory only outside that window")),
    "no_shard": Strategy("no_shard", "NO_SHARD", False, 0,
                         "fully_shard(m, mesh=2-D (N, 1) mesh: replicate N, shard 1)",
                         N_("every rank holds everything; gradients all-reduced, as DDP")),
    "hybrid": Strategy("hybrid", "HYBRID_SHARD", True, 3,
                       "fully_shard(m, mesh=2-D (replicas, shard) mesh)",
                       N_("sharded inside a group (a node), replicated across groups: parameters "
                          "gathered inside the group, gradients reduce-scattered inside it and "
                          "all-reduced across groups")),
}

BACKENDS = ("nccl", "gloo")


def collective_bytes(kind: str, nbytes: float, n: int, backend: str = "nccl") -> float:
    """Bytes one rank sends for one collective over `n` ranks. `nbytes` is the full (unsharded)
    tensor: the all-gather's output, the reduce-scatter's input, the all-reduce's tensor."""
    if n < 1:
        raise ValueError(f"n must be >= 1 ranks, got {n}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    f = (n - 1) / n
    if kind == "all_gather":
        return f * nbytes
    if kind == "reduce_scatter":
        return (2 * f if backend == "gloo" else f) * nbytes
    if kind == "all_reduce":
        return 2 * f * nbytes
    raise ValueError(f"kind must be all_gather, reduce_scatter or all_reduce, got {kind!r}")


@dataclass(frozen=True)
class Group:
    """One FSDP unit (one fully_shard call): bytes of its parameters, unsharded but padded the
    way FSDP2 pads (dim 0 rounded up to a multiple of the shard size), and of the trainable ones."""
    param_bytes: int
    grad_bytes: int                # trainable parameters only: frozen ones are never reduced
    reshard_after_forward: bool = True
    name: str = ""


def calls_per_step(groups, strategy: str) -> dict:
    """How many all-gathers, reduce-scatters and all-reduces one step makes (no accumulation)."""
    s = _strategy(strategy)
    ag = rs = ar = 0
    for g in groups:
        if s.name == "no_shard":
            ar += 1 if g.grad_bytes else 0
            continue
        ag += 2 if (g.reshard_after_forward and s.reshard_after_forward) else 1
        rs += 1 if g.grad_bytes else 0
        if s.name == "hybrid" and g.grad_bytes:
            ar += 1
    return {"all_gather": ag, "reduce_scatter": rs, "all_reduce": ar}


def bytes_per_step(groups, strategy: str, world_size: int, *, replicas: int = 1,
                   backend: str = "nccl") -> dict:
    """Bytes one rank sends in one step, by collective, for `groups` (a list of Group).

    full / grad_op: all groups sharded over `world_size`. no_shard: gradients all-reduced over
    `world_size`. hybrid: sharded over world_size // replicas ranks, then the gradient shard
    all-reduced over `replicas` ranks. Group.reshard_after_forward=False marks the root, which
    FSDP2 keeps unsharded after forward (one all-gather fewer, whatever the strategy)."""
    s = _strategy(strategy)
    if world_size % replicas:
        raise ValueError(f"replicas ({replicas}) must divide world_size ({world_size})")
    out = {"all_gather": 0.0, "reduce_scatter": 0.0, "all_reduce": 0.0}
    shard = world_size // replicas if s.name == "hybrid" else world_size
    for g in groups:
        if s.name == "no_shard":
            out["all_reduce"] += collective_bytes("all_reduce", g.grad_bytes, world_size, backend)
            continue
        gathers = 2 if (g.reshard_after_forward and s.reshard_after_forward) else 1
        out["all_gather"] += gathers * collective_bytes("all_gather", g.param_bytes, shard, backend)
        out["reduce_scatter"] += collective_bytes("reduce_scatter", g.grad_bytes, shard, backend)
        if s.name == "hybrid":
            out["all_reduce"] += collective_bytes("all_reduce", g.grad_bytes / shard, replicas, backend)
    out["total"] = sum(out.values())
    return out


def _strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        from labkit.i18n import tr
        raise ValueError(tr("strategy must be one of {names} (FSDP1: {fsdp1}), got {name!r}",
                            names=sorted(STRATEGIES), fsdp1=[s.fsdp1 for s in STRATEGIES.values()],
                            name=name))
    return STRATEGIES[name]


def padded_numel(shape, shard: int) -> int:
    """Elements FSDP2 holds for a parameter of `shape` sharded over `shard` ranks: dim 0 is
    rounded up to a multiple of `shard` (each rank's shard has the same length)."""
    if not shape:
        shape = (1,)
    rest = 1
    for d in shape[1:]:
        rest *= d
    return -(-shape[0] // shard) * shard * rest
