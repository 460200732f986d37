"""The capstone's second route: the same model, data, clipping and SGD through PyTorch's own
parallelism (layer 3), against the same one-process reference and the same derived bound.

    res = cluster.run(train_native, Config(), dp=2, pp=1, tp=2, steps=3)   # 4 ranks
    res = cluster.run(train_native, Config(), dp=2, pp=2, tp=2, steps=3)   # 8 ranks
    res[0]["losses"]                 # compare with labkit.capstone.reference(...)["losses"]
    loss_bounds(cfg, ref, dp=2, pp=2, tp=2)

One `DeviceMesh` (`init_device_mesh("cpu", (dp, pp, tp), mesh_dim_names=("dp", "pp", "tp"))`)
in the order of labkit's `Layout` grid (TP fastest, DP outermost: picotron's
`torch.arange(world).view(dp, pp, tp)`); every run checks that the mesh's groups are Layout's.
Applied from outside in torchtitan's order:
- the pipeline split first (`labkit.capstone.model.Stage`: embeddings on the first stage, ln_f
  and the head on the last), run by `torch.distributed.pipelining` (`PipelineStage` over the
  mesh's "pp" group, `Schedule1F1B` or `ScheduleGPipe`, cfg.microbatches micro-batches, each
  micro-batch's mean loss, gradients divided by m: scale_grads=True);
- tensor parallelism by DTensor: each block rebuilt with q, k, v apart
  (`labkit.tp.dtensor_tp.SplitBlock`, the same weights) and `parallelize_module` with
  torchtitan's plan (`labkit.tp.dtensor_tp.tp_plan`: ColwiseParallel q, k, v, fc; RowwiseParallel
  proj, fc_out) over the mesh's "tp" dimension, as notebook 08's `labkit.tp.two_d`; the
  embeddings, norms and head stay whole on every TP rank, as in labkit's route;
- data parallelism by FSDP2: `fully_shard` on every block, then on the stage, over "dp" (the
  gradients reduce-scattered and averaged; each DP rank runs its rows of the global batch).
The clip norm: each gradient's squares summed as a DTensor (`full_tensor()` reduces them over
the ranks that hold its shards, a replica counted once), summed over the PP stages, torch's
clip rule; `torch.optim.SGD`.

What does not run on CPU: torch's context parallelism (`torch.distributed.tensor.experimental.
context_parallel`) replaces scaled_dot_product_attention's CUDA kernels (flash, efficient,
cuDNN) by its ring; the CPU (math) kernel has no handler, so CP stays labkit's own ring
(`labkit.capstone.cp`). Everything above runs on gloo.

No wrong variant yet: a mesh built (tp, pp, dp) raises a KeyError inside DTensor's
redistribute (the flattened dp x tp mesh is not a slice of it) rather than training wrongly.
"""
import torch
import torch.distributed as dist

from labkit.capstone.data import global_batch
from labkit.capstone.model import Config, Stage, build

__all__ = ["train_native", "mesh_groups", "WRONG"]

WRONG = ()
SCHEDULES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe"}
DIMS = ("dp", "pp", "tp")


def _ce(logits, targets):
    import torch.nn.functional as F
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def mesh_groups(mesh) -> dict:
    """{dim: sorted list of the mesh's groups along dim, as global ranks}."""
    out = {}
    names = mesh.mesh_dim_names
    for d in DIMS:
        i = names.index(d)
        t = mesh.mesh.movedim(i, -1).reshape(-1, mesh.mesh.shape[i])
        out[d] = sorted(sorted(r) for r in t.tolist())
    return out


def _grad_sq(p) -> torch.Tensor:
    """The sum of squares of p's whole gradient (DTensor: reduced over its shards' ranks)."""
    g = p.grad
    sq = (g.float() * g.float()).sum()
    return sq.full_tensor() if hasattr(sq, "full_tensor") else sq


def train_native(cfg: Config = Config(), dp: int = 2, pp: int = 1, tp: int = 2, steps: int = 3,
                 schedule: str = "1f1b", wrong: str = None) -> dict:
    """`steps` SGD steps on this rank's part of dp x pp x tp with torch's FSDP2, DTensor TP
    and pipelining (call on every rank). Returns {"rank", "coords", "losses" (the global batch's
    mean loss per step, the same on every rank), "norms" (before clipping), "mesh" (its groups),
    "layout" (labkit.nd.layout.Layout's groups), "placements" (one block weight's)}."""
    import logging

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from labkit.nd.layout import Layout
    from labkit.tp.dtensor_tp import SplitBlock, tp_plan
    if wrong is not None and wrong not in WRONG:
        raise ValueError(f"wrong must be None or one of {WRONG}, got {wrong!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {schedule!r}")
    world = dist.get_world_size()
    if world != dp * pp * tp:
        raise ValueError(f"dp({dp}) x pp({pp}) x tp({tp}) = {dp * pp * tp} != world size "
                         f"({world}) on rank {dist.get_rank()}; start labkit.Cluster({dp * pp * tp})")
    m = cfg.microbatches
    if cfg.batch % (dp * m):
        raise ValueError(f"batch {cfg.batch} does not split into dp({dp}) x microbatches({m})")
    if cfg.n_layer % pp:
        raise ValueError(f"{cfg.n_layer} blocks do not split into pp = {pp} equal stages")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    layout = Layout(dp=dp, pp=pp, tp=tp, gpus_per_node=max(8, world))
    mesh = init_device_mesh("cpu", (dp, pp, tp), mesh_dim_names=DIMS)
    rank = dist.get_rank()
    c = layout.coords(rank)
    stage_idx = mesh["pp"].get_local_rank()

    model = build(cfg)
    per = cfg.n_layer // pp
    blocks = [SplitBlock(b) for b in model.blocks[stage_idx * per:(stage_idx + 1) * per]]
    if tp > 1:                                             # tensor parallelism first
        for b in blocks:
            parallelize_module(b, mesh["tp"], tp_plan())
    stage = Stage(model, blocks, stage_idx == 0, stage_idx == pp - 1)
    del model
    if dp > 1:                                             # then the data-parallel wrapping
        for b in stage.blocks:
            fully_shard(b, mesh=mesh["dp"])
        fully_shard(stage, mesh=mesh["dp"])
    params = [p for p in stage.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=cfg.lr)
    sched = None
    if pp > 1:
        import torch.distributed.pipelining as tpp
        pstage = tpp.PipelineStage(stage, stage_idx, pp, torch.device("cpu"),
                                   group=mesh["pp"].get_group())
        sched = getattr(tpp, SCHEDULES[schedule])(pstage, m, loss_fn=_ce)
    rows = cfg.batch // dp
    pp_group = mesh["pp"].get_group() if pp > 1 else None
    dp_group = mesh["dp"].get_group() if dp > 1 else None
    losses, norms = [], []
    for step in range(steps):
        x, y = global_batch(step, cfg.batch, cfg.seq)
        x, y = x[c.dp * rows:(c.dp + 1) * rows], y[c.dp * rows:(c.dp + 1) * rows]   # Layout's row
        opt.zero_grad(set_to_none=True)
        if sched is None:
            loss = _ce(stage(x), y)
            loss.backward()
            mine = float(loss.detach())
        else:
            mb = []
            args = (x,) if stage.first else ()
            kwargs = {"target": y, "losses": mb} if stage.last else {}
            sched.step(*args, **kwargs)
            mine = sum(float(t.detach()) for t in mb) / m if stage.last else 0.0
        sq = torch.stack([_grad_sq(p) for p in params if p.grad is not None]).sum()
        if pp_group is not None:
            dist.all_reduce(sq, group=pp_group)           # stages hold different parameters
        norm = float(sq.sqrt())
        coef = min(1.0, cfg.max_norm / (norm + 1e-6))    # torch's clip rule
        if coef < 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(coef)
        opt.step()
        t = torch.tensor([mine], dtype=torch.float64)
        if pp_group is not None:
            dist.all_reduce(t, group=pp_group)            # the last stage's loss to every stage
        if dp_group is not None:
            dist.all_reduce(t, group=dp_group)
        losses.append(float(t) / dp)
        norms.append(norm)
    sample = next(p for n, p in stage.named_parameters() if "attn.q.weight" in n)
    return {"rank": rank, "coords": tuple(c), "losses": losses, "norms": norms,
            "mesh": mesh_groups(mesh),
            "layout": {d: sorted(sorted(g) for g in layout.groups(d)) for d in DIMS},
            "placements": str(getattr(sample, "placements", "plain tensor"))}
