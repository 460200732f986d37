"""The capstone's process groups, from one grid tensor (picotron's `ProcessGroupManager`).

    grid = Grid(dp=2, pp=2, cp=1, tp=2)          # on every rank of an 8-rank cluster
    grid.coords                                   # this rank's (dp, pp, cp, tp)
    grid.groups["tp"], ["cp"], ["pp"], ["dp"], ["dp_cp"]    # torch process groups
    grid.ranks("pp")                              # this rank's PP group as global ranks

`torch.arange(world).view(dp, pp, cp, tp)` puts TP fastest (neighbouring ranks, one node), CP
beside it, then PP, and DP outermost: the notes' order ("tp-pp-dp" with CP after TP, as
Megatron-core places it). Every group list is checked against `labkit.parallel_dims.Layout`,
which validates the degrees first (errors print every number).
"""
import torch
import torch.distributed as dist

from labkit.parallel_dims import Layout, validate

DIMS = ("dp", "pp", "cp", "tp")             # the grid's axes, slowest first


def group_lists(dp: int, pp: int, cp: int, tp: int) -> dict:
    """{dim: [[global ranks], ...]} for tp, cp, pp, dp and dp_cp (the gradient-reduction group:
    data and context ranks of one (pp, tp)), read off the grid tensor."""
    g = torch.arange(dp * pp * cp * tp).view(dp, pp, cp, tp)
    axis = {d: i for i, d in enumerate(DIMS)}

    def along(*dims):
        rest = [axis[d] for d in DIMS if d not in dims]
        n = 1
        for d in dims:
            n *= g.shape[axis[d]]
        return g.permute(*rest, *(axis[d] for d in dims)).reshape(-1, n).tolist()
    out = {d: along(d) for d in DIMS}
    out["dp_cp"] = along("dp", "cp")
    return out


def reduction_groups(param_is_tp_replicated: bool, sequence_parallel: bool = False) -> tuple:
    """Which groups a parameter's gradient is summed over (averaged by the data-parallel
    degree): DP always (each DP rank saw other sequences), CP always (each CP rank saw other
    positions of them), TP only for a replicated parameter whose TP ranks saw different
    positions (sequence parallelism); a TP-split parameter never (each TP rank holds its part)."""
    return ("dp", "cp") + (("tp",) if param_is_tp_replicated and sequence_parallel else ())


class Grid:
    """This rank's place in the DP x PP x CP x TP grid and its process groups (call on every
    rank: torch's `new_group` is collective, so every group is made everywhere)."""

    def __init__(self, dp: int = 1, pp: int = 1, cp: int = 1, tp: int = 1):
        world = dist.get_world_size()
        validate(dp, pp, tp, world_size=world, cp=cp)
        self.dp, self.pp, self.cp, self.tp = dp, pp, cp, tp
        self.lists = group_lists(dp, pp, cp, tp)
        lay = Layout(dp=dp, pp=pp, tp=tp, cp=cp, gpus_per_node=world, order="tp-cp-pp-dp")
        for d in ("dp", "pp", "tp") + (("cp",) if cp > 1 else ()):
            if sorted(map(sorted, lay.groups(d))) != sorted(map(sorted, self.lists[d])):
                raise AssertionError(f"grid groups along {d} {self.lists[d]} != parallel_dims' "
                                     f"{lay.groups(d)}")
        me = dist.get_rank()
        self.rank = me
        self.coords = tuple(int(i) for i in (torch.arange(world).view(dp, pp, cp, tp) == me)
                            .nonzero()[0])
        self.groups = {}
        for d, lists in self.lists.items():
            for ranks in lists:
                pg = dist.new_group(ranks)
                if me in ranks:
                    self.groups[d] = pg
                    setattr(self, f"_{d}_ranks", ranks)

    def ranks(self, dim: str) -> list:
        return getattr(self, f"_{dim}_ranks")

    @property
    def stage(self) -> int:
        return self.coords[1]

    def peer(self, stage: int) -> int:
        """The global rank of pipeline stage `stage` in this rank's PP group."""
        return self.ranks("pp")[stage]
