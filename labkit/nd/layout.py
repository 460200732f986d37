"""The parallel grid: which global rank holds which (dp, pp, tp, cp) coordinate, and which
expert-parallel group it joins (layer 1: pure arithmetic).

    lay = Layout(dp=2, pp=2, tp=8, gpus_per_node=8)       # the notes' 32 GPUs: 8 x 2 x 2
    lay.coords(13)            # -> Coord(dp=0, pp=1, tp=5, cp=0)
    lay.groups("tp")          # -> [[0..7], [8..15], ...]: the ranks that talk inside each TP group
    lay.spans_nodes("tp")     # -> False: each TP group stays inside one node
    validate(dp=2, pp=2, tp=8, world_size=32, gpus_per_node=8, layers=80, heads=64)
    Layout(dp=8, pp=16, tp=8, cp=16, order="megatron")    # TP x CP x PP x DP: Llama 3's long context
    Layout(dp=8, pp=2, tp=1, ep=8).groups("ep")           # experts over 8 of the 8 DP replicas

Order names the dimensions from the fastest-varying (neighbouring ranks) to the slowest, as
Megatron-core's `order` argument does (`megatron/core/parallel_state.py`, `RankGenerator`,
default ``"tp-cp-ep-dp-pp"``):
- ``"tp-pp-dp"`` (the notes, "DP outermost"): rank = ((dp * PP + pp) * CP + cp) * TP + tp.
- ``"tp-cp-dp-pp"`` (Megatron-core's default): PP outermost,
  rank = ((pp * DP + dp) * CP + cp) * TP + tp.
CP, when not named, sits right after TP (Megatron's place): a CP group of TP x CP <= 8 ranks stays
inside a node. With cp = 1 the order is printed without it ("tp-dp-pp"). Both keep TP
innermost, so a TP group is consecutive ranks inside a node.
The difference is what crosses the slow links between nodes: with DP outermost, a pipeline's
stages sit in neighbouring ranks (inside a node when TP x CP x PP <= GPUs per node) and the
data-parallel replicas talk across nodes; with PP outermost, each pipeline stage is a block of
nodes and the stage boundaries cross nodes.

EP is not a dimension of its own: as in Megatron-core (`initialize_model_parallel` builds a
second `RankGenerator(tp=expert_tp, ep=ep, dp=expert_dp, pp=pp, cp=1)` whose PP groups must
equal the dense ones) and torchtitan (EP borrows from dp_shard x cp), the expert layers re-cut
the CP x DP ranks of each (tp, pp) into EP x EDP: number the data ranks d = dp * CP + cp; the
expert group is d mod EP's neighbours, ep index = d % EP, expert-data index edp = d // EP. Expert
TP is kept equal to TP. Attention and the dense layers see TP x CP x PP x DP; the experts see
TP x EP x PP x EDP on the same GPUs, EDP = CP x DP / EP.
picotron builds the 3D grid as ``torch.arange(world).view(dp, pp, tp)``; torchtitan's
``ParallelDims`` validates it as here (errors print every number).
"""
import functools
from dataclasses import dataclass
from typing import NamedTuple

from labkit.i18n import tr

DIMS = ("dp", "pp", "tp", "cp")
GROUP_DIMS = DIMS + ("ep", "edp")       # ep, edp: the expert layers' cut of the CP x DP ranks
ORDERS = {"notes": "tp-pp-dp", "megatron": "tp-dp-pp"}


class Coord(NamedTuple):
    dp: int
    pp: int
    tp: int
    cp: int = 0


def _order(order: str, cp: int = 1) -> tuple:
    """'tp-pp-dp' or a name from ORDERS -> ('tp', 'pp', 'dp'), fastest first; cp is placed
    right after tp when not named and dropped when cp = 1; ep is dropped (it lives inside DP)."""
    order = ORDERS.get(order, order)
    named = [d for d in str(order).lower().split("-") if d != "ep"]
    dims = [d for d in named if d != "cp"]
    if sorted(dims) != sorted(("dp", "pp", "tp")) or named.count("cp") > 1:
        raise ValueError(f"order {order!r} must name each of tp, pp, dp once (cp, ep optional), "
                         f"fastest-varying first (e.g. 'tp-pp-dp' for the notes, 'tp-cp-dp-pp' for "
                         f"Megatron-core); or one of {sorted(ORDERS)}")
    if cp > 1:
        dims = named if "cp" in named else [dims[0], "cp", *dims[1:]] if dims[0] == "tp" else ["cp", *dims]
    return tuple(dims)


def problems(dp: int, pp: int, tp: int, world_size: int = None, gpus_per_node: int = None,
             layers: int = None, heads: int = None, hidden: int = None, cp: int = 1, ep: int = 1,
             seq: int = None, experts: int = None) -> list:
    """Every reason this layout cannot run, each sentence with all its numbers (empty: fine)."""
    out = []
    for name, v in (("dp", dp), ("pp", pp), ("tp", tp), ("cp", cp), ("ep", ep),
                    ("world_size", world_size), ("gpus_per_node", gpus_per_node), ("layers", layers),
                    ("heads", heads), ("hidden", hidden), ("seq", seq), ("experts", experts)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            out.append(tr("{name} must be a whole number >= 1, got {v!r}", name=name, v=v))
    if out:
        return out
    n = dp * pp * tp * cp
    if world_size is not None and n != world_size:
        dims = f"dp({dp}) x pp({pp}) x tp({tp})" + (f" x cp({cp})" if cp > 1 else "")
        out.append(tr("{dims} = {n} != world size ({world_size}); the degrees must multiply to "
                      "the number of GPUs", dims=dims, n=n, world_size=world_size))
    if gpus_per_node is not None and tp > gpus_per_node:
        out.append(tr("tp({tp}) > GPUs per node ({g}): a TP group would cross the slow link "
                      "between nodes, and TP talks inside every layer; keep tp <= {g}",
                      tp=tp, g=gpus_per_node))
    if gpus_per_node is not None and tp <= gpus_per_node and gpus_per_node % tp:
        out.append(tr("GPUs per node ({g}) is not a multiple of tp({tp}): some TP group would "
                      "straddle two nodes; pick tp among the divisors of {g}", g=gpus_per_node, tp=tp))
    if layers is not None and layers % pp:
        out.append(tr("layers ({layers}) not divisible by pp({pp}): {layers} / {pp} = {q:.2f} "
                      "layers per stage; pick pp among the divisors of {layers}",
                      layers=layers, pp=pp, q=layers / pp))
    if heads is not None and heads % tp:
        out.append(tr("heads ({heads}) not divisible by tp({tp}): {heads} / {tp} = {q:.2f} heads "
                      "per rank; TP splits attention by whole heads", heads=heads, tp=tp, q=heads / tp))
    if hidden is not None and hidden % tp:
        out.append(tr("hidden ({hidden}) not divisible by tp({tp}): {hidden} / {tp} = {q:.2f} "
                      "columns per rank", hidden=hidden, tp=tp, q=hidden / tp))
    if seq is not None and cp > 1 and seq % (2 * cp):
        out.append(tr("sequence ({seq}) not divisible by 2 x cp({cp}) = {two_cp}: the causal "
                      "load-balanced (zig-zag) split gives each rank two of {two_cp} equal chunks",
                      seq=seq, cp=cp, two_cp=2 * cp))
    if (cp * dp) % ep:
        out.append(tr("ep({ep}) does not divide cp({cp}) x dp({dp}) = {cd}: expert parallelism "
                      "re-cuts the CP x DP ranks, so pick ep among the divisors of {cd}",
                      ep=ep, cp=cp, dp=dp, cd=cp * dp))
    if experts is not None and experts % ep:
        out.append(tr("experts ({experts}) not divisible by ep({ep}): {experts} / {ep} = {q:.2f} "
                      "experts per rank; pick ep among the divisors of {experts}",
                      experts=experts, ep=ep, q=experts / ep))
    return out


def validate(dp: int, pp: int, tp: int, world_size: int = None, gpus_per_node: int = None,
             layers: int = None, heads: int = None, hidden: int = None, cp: int = 1, ep: int = 1,
             seq: int = None, experts: int = None) -> None:
    """Raise ValueError listing every problem (see `problems`), or return None."""
    found = problems(dp, pp, tp, world_size, gpus_per_node, layers, heads, hidden, cp, ep, seq, experts)
    if found:
        raise ValueError(tr("invalid parallel layout:") + "\n  - " + "\n  - ".join(found))


@dataclass(frozen=True)
class Layout:
    """A DP x PP x CP x TP grid over `dp * pp * cp * tp` ranks, `gpus_per_node` ranks per node;
    the expert layers cut its CP x DP ranks into EP x EDP."""
    dp: int = 1                 # data-parallel replicas (each holds a full pipeline)
    pp: int = 1                 # pipeline stages (each holds layers / pp layers)
    tp: int = 1                 # tensor-parallel ranks (each holds 1 / tp of every layer's matrices)
    gpus_per_node: int = 8      # ranks that share the fast link (NVLink) of one node
    order: str = "tp-pp-dp"     # fastest-varying first: the notes' DP outermost
    cp: int = 1                 # context-parallel ranks (each holds 1 / cp of every sequence)
    ep: int = 1                 # expert-parallel ranks (each holds 1 / ep of the experts)

    def __post_init__(self):
        object.__setattr__(self, "order", "-".join(_order(self.order, self.cp)))
        validate(self.dp, self.pp, self.tp, gpus_per_node=self.gpus_per_node, cp=self.cp, ep=self.ep)

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp * self.cp

    @property
    def edp(self) -> int:
        """Expert data parallelism: the replicas of each expert, CP x DP / EP."""
        return self.cp * self.dp // self.ep

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def _strides(self) -> dict:
        stride, out = 1, {"cp": 0}
        for d in self.order.split("-"):
            out[d] = stride
            stride *= getattr(self, d)
        return out

    def coords(self, rank: int) -> Coord:
        if not 0 <= rank < self.world_size:
            raise ValueError(tr("rank {rank} is outside 0..{last} (dp {dp} x pp {pp} x tp {tp} x "
                                "cp {cp})", rank=rank, last=self.world_size - 1, dp=self.dp,
                                pp=self.pp, tp=self.tp, cp=self.cp))
        s = self._strides()
        return Coord(**{d: rank // s[d] % getattr(self, d) if s[d] else 0 for d in DIMS})

    def rank_of(self, dp: int = 0, pp: int = 0, tp: int = 0, cp: int = 0) -> int:
        c = dict(dp=dp, pp=pp, tp=tp, cp=cp)
        for d, v in c.items():
            if not 0 <= v < getattr(self, d):
                raise ValueError(tr("{d} coordinate {v} is outside 0..{last}", d=d, v=v,
                                    last=getattr(self, d) - 1))
        s = self._strides()
        return sum(c[d] * s[d] for d in DIMS)

    def expert_coords(self, rank: int) -> tuple:
        """(ep, edp) of `rank`: data rank d = dp * CP + cp, ep = d % EP, edp = d // EP."""
        c = self.coords(rank)
        d = c.dp * self.cp + c.cp
        return d % self.ep, d // self.ep

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def groups(self, dim: str) -> list:
        """The ranks that communicate along `dim`: one list per fixed value of the others.
        dim 'ep': ranks that hold different experts and exchange tokens (all-to-all); 'edp':
        ranks that hold the same experts and all-reduce their gradients."""
        if dim not in GROUP_DIMS:
            raise ValueError(f"dim must be one of {GROUP_DIMS}, got {dim!r}")
        seen, out = set(), []
        for r in range(self.world_size):
            if r in seen:
                continue
            c = self.coords(r)._asdict()
            if dim in ("ep", "edp"):
                e, f = self.expert_coords(r)
                ds = [e + self.ep * i for i in range(self.edp)] if dim == "edp" else \
                     [i + self.ep * f for i in range(self.ep)]
                g = [self.rank_of(**{**c, "dp": d // self.cp, "cp": d % self.cp}) for d in ds]
            else:
                g = [self.rank_of(**{**c, dim: i}) for i in range(getattr(self, dim))]
            seen.update(g)
            out.append(g)
        return out

    def group_of(self, rank: int, dim: str) -> list:
        return next(g for g in self.groups(dim) if rank in g)

    def spans_nodes(self, dim: str) -> bool:
        """True when some group of `dim` holds ranks of two or more nodes (its traffic is slow)."""
        return _spans_nodes(self, dim)

    def dims(self) -> tuple:
        """The group dimensions this layout uses: tp, pp, dp, then cp and ep / edp when > 1."""
        return ("tp", "pp", "dp") + (("cp",) if self.cp > 1 else ()) + \
            (("ep", "edp") if self.ep > 1 else ())

    def table(self) -> list:
        """[(rank, node, dp, pp, tp)] for every rank, then cp, ep when they are > 1."""
        rows = []
        for r in range(self.world_size):
            c = self.coords(r)
            row = (r, self.node_of(r), c.dp, c.pp, c.tp) + ((c.cp,) if self.cp > 1 else ())
            rows.append(row + ((self.expert_coords(r)[0],) if self.ep > 1 else ()))
        return rows

    def describe(self) -> str:
        extra = (f" x cp {self.cp}" if self.cp > 1 else "") + \
            (tr(" (experts: ep {ep} x edp {edp})", ep=self.ep, edp=self.edp) if self.ep > 1 else "")
        lines = [tr("{n} GPUs = dp {dp} x pp {pp} x tp {tp}{extra} on {nodes} node(s) of {g}; "
                    "order {order} (fastest first)", n=self.world_size, dp=self.dp, pp=self.pp,
                    tp=self.tp, extra=extra, nodes=self.nodes, g=self.gpus_per_node, order=self.order)]
        for d in self.dims():
            gs = self.groups(d)
            where = tr("crosses nodes") if self.spans_nodes(d) else tr("inside a node")
            lines.append(tr("  {d}: {k} groups of {size}, e.g. {first} ({where})", d=d, k=len(gs),
                            size=len(gs[0]), first=gs[0], where=where))
        return "\n".join(lines)

    __str__ = describe


@functools.lru_cache(maxsize=4096)
def _spans_nodes(layout: Layout, dim: str) -> bool:
    """Without listing every group (16,384 ranks are too many for the planner's loops): nodes
    are runs of G consecutive ranks, so a group stays in one node iff its lowest and highest
    rank do, and that depends on the group's offset only through offset mod G."""
    G, st = layout.gpus_per_node, layout._strides()
    if dim not in GROUP_DIMS:
        raise ValueError(f"dim must be one of {GROUP_DIMS}, got {dim!r}")
    if dim in ("ep", "edp"):
        others = ("tp", "pp")
        sets = ([[i + layout.ep * f for i in range(layout.ep)] for f in range(layout.edp)]
                if dim == "ep" else
                [[e + layout.ep * i for i in range(layout.edp)] for e in range(layout.ep)])
        rel = [[d // layout.cp * st["dp"] + d % layout.cp * st["cp"] for d in g] for g in sets]
        spans = [(min(r), max(r)) for r in rel if len(r) > 1]
    else:
        n = getattr(layout, dim)
        if n == 1:
            return False
        others = tuple(d for d in DIMS if d != dim)
        spans = [(0, (n - 1) * st[dim])]
    residues = {0}
    for d in others:
        if st.get(d):
            residues = {(u + c * st[d]) % G for u in residues for c in range(getattr(layout, d))}
    return any((u + lo) // G != (u + hi) // G for u in residues for lo, hi in spans)


def build_groups(layout: Layout) -> dict:
    """On every rank of a cluster of `layout.world_size`: {'tp','pp','dp' (and 'cp', 'ep',
    'edp' when used): this rank's group}.

    Every rank must create every group in the same order (torch's `new_group` is collective),
    so all groups are made and each rank keeps its own.
    """
    import torch.distributed as dist
    if dist.get_world_size() != layout.world_size:
        raise ValueError(tr("layout needs {n} ranks (dp {dp} x pp {pp} x tp {tp} x cp {cp}), the "
                            "cluster has {have}; start it with that many ranks", n=layout.world_size,
                            dp=layout.dp, pp=layout.pp, tp=layout.tp, cp=layout.cp,
                            have=dist.get_world_size()))
    me, out = dist.get_rank(), {}
    for d in layout.dims():
        for g in layout.groups(d):
            pg = dist.new_group(g)
            if me in g:
                out[d] = pg
    return out
