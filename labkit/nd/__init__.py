"""What spans the dimensions of a parallel layout (TP x CP x PP x DP, EP inside CP x DP).

- `layout` (pure): the grid, which global rank holds which coordinate, the groups of each
  dimension and their validation (`Layout`, `validate`, `build_groups`);
- `clipping`: the global gradient norm over every dimension (one all-reduce of one number per
  summed dimension; replicas counted once) and the bounds it is judged by;
- `parity`: that norm against one process on DP x PP x TP, EP x CP and tied stages, run on the ranks;
- `plots`: its picture.

    from labkit.nd import Layout
    Layout(dp=2, pp=2, tp=8, gpus_per_node=8).groups("tp")

(`labkit.parallel_dims` and `labkit.clipping`, the old places, still import for one release,
with a DeprecationWarning.)
"""
from labkit.nd.layout import Coord, Layout, build_groups, problems, validate

__all__ = ["Coord", "Layout", "build_groups", "problems", "validate"]
