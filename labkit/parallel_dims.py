"""The 3D grid: which global rank holds which (dp, pp, tp) coordinate (layer 1: pure arithmetic).

    lay = Layout(dp=2, pp=2, tp=8, gpus_per_node=8)       # the notes' 32 GPUs: 8 x 2 x 2
    lay.coords(13)            # -> Coord(dp=0, pp=1, tp=5)
    lay.groups("tp")          # -> [[0..7], [8..15], ...]: the ranks that talk inside each TP group
    lay.spans_nodes("tp")     # -> False: each TP group stays inside one node
    validate(dp=2, pp=2, tp=8, world_size=32, gpus_per_node=8, layers=80, heads=64)

Order names the dimensions from the fastest-varying (neighbouring ranks) to the slowest, as
Megatron-core's `order` argument does (`megatron/core/parallel_state.py`, `RankGenerator`):
- ``"tp-pp-dp"`` (the notes, "DP outermost"): rank = (dp * PP + pp) * TP + tp.
- ``"tp-dp-pp"`` (Megatron-core's default ``tp-cp-ep-dp-pp`` with cp = ep = 1): PP outermost,
  rank = (pp * DP + dp) * TP + tp.
Both keep TP innermost, so a TP group is consecutive ranks inside a node. The difference is
what crosses the slow links between nodes: with DP outermost, a pipeline's stages sit in
neighbouring ranks (inside a node when TP x PP <= GPUs per node) and data-parallel replicas
talk across nodes; with PP outermost, each pipeline stage is a block of nodes and the stage
boundaries cross nodes. picotron builds the same grid as ``torch.arange(world).view(dp, pp, tp)``;
torchtitan's ``ParallelDims`` validates it as here (errors print every number).
"""
import functools
from dataclasses import dataclass
from typing import NamedTuple

DIMS = ("dp", "pp", "tp")
ORDERS = {"notes": "tp-pp-dp", "megatron": "tp-dp-pp"}


class Coord(NamedTuple):
    dp: int
    pp: int
    tp: int


def _order(order: str) -> tuple:
    """'tp-pp-dp' or a name from ORDERS -> ('tp', 'pp', 'dp'), fastest first (cp, ep dropped)."""
    order = ORDERS.get(order, order)
    dims = tuple(d for d in order.lower().split("-") if d not in ("cp", "ep"))
    if sorted(dims) != sorted(DIMS):
        raise ValueError(f"order {order!r} must name each of tp, pp, dp once, fastest-varying first "
                         f"(e.g. 'tp-pp-dp' for the notes, 'tp-dp-pp' for Megatron-core); "
                         f"or one of {sorted(ORDERS)}")
    return dims


def problems(dp: int, pp: int, tp: int, world_size: int = None, gpus_per_node: int = None,
             layers: int = None, heads: int = None, hidden: int = None) -> list:
    """Every reason this layout cannot run, each sentence with all its numbers (empty: fine)."""
    out = []
    for name, v in (("dp", dp), ("pp", pp), ("tp", tp), ("world_size", world_size),
                    ("gpus_per_node", gpus_per_node), ("layers", layers), ("heads", heads),
                    ("hidden", hidden)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            out.append(f"{name} must be a whole number >= 1, got {v!r}")
    if out:
        return out
    if world_size is not None and dp * pp * tp != world_size:
        out.append(f"dp({dp}) x pp({pp}) x tp({tp}) = {dp * pp * tp} != world size ({world_size}); "
                   f"the three degrees must multiply to the number of GPUs")
    if gpus_per_node is not None and tp > gpus_per_node:
        out.append(f"tp({tp}) > GPUs per node ({gpus_per_node}): a TP group would cross the slow "
                   f"link between nodes, and TP talks inside every layer; keep tp <= {gpus_per_node}")
    if gpus_per_node is not None and tp <= gpus_per_node and gpus_per_node % tp:
        out.append(f"GPUs per node ({gpus_per_node}) is not a multiple of tp({tp}): some TP group "
                   f"would straddle two nodes; pick tp among the divisors of {gpus_per_node}")
    if layers is not None and layers % pp:
        out.append(f"layers ({layers}) not divisible by pp({pp}): {layers} / {pp} = "
                   f"{layers / pp:.2f} layers per stage; pick pp among the divisors of {layers}")
    if heads is not None and heads % tp:
        out.append(f"heads ({heads}) not divisible by tp({tp}): {heads} / {tp} = {heads / tp:.2f} "
                   f"heads per rank; TP splits attention by whole heads")
    if hidden is not None and hidden % tp:
        out.append(f"hidden ({hidden}) not divisible by tp({tp}): {hidden} / {tp} = "
                   f"{hidden / tp:.2f} columns per rank")
    return out


def validate(dp: int, pp: int, tp: int, world_size: int = None, gpus_per_node: int = None,
             layers: int = None, heads: int = None, hidden: int = None) -> None:
    """Raise ValueError listing every problem (see `problems`), or return None."""
    found = problems(dp, pp, tp, world_size, gpus_per_node, layers, heads, hidden)
    if found:
        raise ValueError("invalid parallel layout:\n  - " + "\n  - ".join(found))


@dataclass(frozen=True)
class Layout:
    """A DP x PP x TP grid over `dp * pp * tp` ranks, `gpus_per_node` ranks per node."""
    dp: int = 1                 # data-parallel replicas (each holds a full pipeline)
    pp: int = 1                 # pipeline stages (each holds layers / pp layers)
    tp: int = 1                 # tensor-parallel ranks (each holds 1 / tp of every layer's matrices)
    gpus_per_node: int = 8      # ranks that share the fast link (NVLink) of one node
    order: str = "tp-pp-dp"     # fastest-varying first: the notes' DP outermost

    def __post_init__(self):
        object.__setattr__(self, "order", "-".join(_order(self.order)))
        validate(self.dp, self.pp, self.tp, gpus_per_node=self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def _strides(self) -> dict:
        stride, out = 1, {}
        for d in self.order.split("-"):
            out[d] = stride
            stride *= getattr(self, d)
        return out

    def coords(self, rank: int) -> Coord:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside 0..{self.world_size - 1} "
                             f"(dp {self.dp} x pp {self.pp} x tp {self.tp})")
        s = self._strides()
        return Coord(**{d: rank // s[d] % getattr(self, d) for d in DIMS})

    def rank_of(self, dp: int = 0, pp: int = 0, tp: int = 0) -> int:
        c = dict(dp=dp, pp=pp, tp=tp)
        for d, v in c.items():
            if not 0 <= v < getattr(self, d):
                raise ValueError(f"{d} coordinate {v} is outside 0..{getattr(self, d) - 1}")
        s = self._strides()
        return sum(c[d] * s[d] for d in DIMS)

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def groups(self, dim: str) -> list:
        """The ranks that communicate along `dim`: one list per fixed value of the other two."""
        if dim not in DIMS:
            raise ValueError(f"dim must be one of {DIMS}, got {dim!r}")
        seen, out = set(), []
        for r in range(self.world_size):
            if r in seen:
                continue
            c = self.coords(r)._asdict()
            g = [self.rank_of(**{**c, dim: i}) for i in range(getattr(self, dim))]
            seen.update(g)
            out.append(g)
        return out

    def group_of(self, rank: int, dim: str) -> list:
        return next(g for g in self.groups(dim) if rank in g)

    def spans_nodes(self, dim: str) -> bool:
        """True when some group of `dim` holds ranks of two or more nodes (its traffic is slow)."""
        return _spans_nodes(self, dim)

    def table(self) -> list:
        """[(rank, node, dp, pp, tp)] for every rank."""
        return [(r, self.node_of(r), *self.coords(r)) for r in range(self.world_size)]

    def describe(self) -> str:
        lines = [f"{self.world_size} GPUs = dp {self.dp} x pp {self.pp} x tp {self.tp} on "
                 f"{self.nodes} node(s) of {self.gpus_per_node}; order {self.order} (fastest first)"]
        for d in ("tp", "pp", "dp"):
            gs = self.groups(d)
            where = "crosses nodes" if self.spans_nodes(d) else "inside a node"
            lines.append(f"  {d}: {len(gs)} groups of {len(gs[0])}, e.g. {gs[0]} ({where})")
        return "\n".join(lines)

    __str__ = describe


@functools.lru_cache(maxsize=4096)
def _spans_nodes(layout: Layout, dim: str) -> bool:
    return any(len({layout.node_of(r) for r in g}) > 1 for g in layout.groups(dim))


def build_groups(layout: Layout) -> dict:
    """On every rank of a cluster of `layout.world_size`: {'dp','pp','tp': this rank's group}.

    Every rank must create every group in the same order (torch's `new_group` is collective),
    so all groups are made and each rank keeps its own.
    """
    import torch.distributed as dist
    if dist.get_world_size() != layout.world_size:
        raise ValueError(f"layout needs {layout.world_size} ranks (dp {layout.dp} x pp {layout.pp} "
                         f"x tp {layout.tp}), the cluster has {dist.get_world_size()}")
    me, out = dist.get_rank(), {}
    for d in DIMS:
        for g in layout.groups(d):
            pg = dist.new_group(g)
            if me in g:
                out[d] = pg
    return out
