"""Save a capstone run with torch.distributed.checkpoint under one layout, resume under another.

    save(stage, first_block, step, path, tp_group)     # on every rank (collective), after step k
    step = load(model, path)                           # model = build(cfg): full, one process

Each rank contributes its pipeline stage's parameters as full tensors under the one-process
TinyGPT's names ("blocks.3.qkv.weight", "tok.weight", "head.weight"): a weight that tensor
parallelism split (`labkit.tp.ColumnParallelLinear`: rows, fused q/k/v too; `RowParallelLinear`:
columns) is gathered over the TP group first. The files then do not depend on the layout, and
DCP writes each key once (the DP and TP replicas of a tensor are deduplicated by its planner).
Loading reads every key into the whole model; the new layout then cuts and splits it as usual,
so a checkpoint written by dp 2 x pp 2 x tp 2 resumes on dp 4 x pp 2 or on one process.
The optimizer is plain SGD: it has no state to save, only the step count.
"""
import torch
import torch.distributed as dist


def _block_name(name: str) -> str:
    """A TPBlock's parameter name -> the labkit.toy_models.Block's it was split from."""
    return name.replace("blk.", "").replace("attn.", "").replace("mlp.", "")   # blk.: Recompute


def _gather_full(owner, leaf: str, t: torch.Tensor, group) -> torch.Tensor:
    from labkit.tp.layers import ColumnParallelLinear, RowParallelLinear
    n = dist.get_world_size(group)
    if isinstance(owner, ColumnParallelLinear):            # rows owner.rows of the full tensor
        parts = [torch.empty_like(t) for _ in range(n)]
        rows = [torch.empty_like(owner.rows) for _ in range(n)]
        dist.all_gather(parts, t.contiguous(), group=group)
        dist.all_gather(rows, owner.rows.contiguous(), group=group)
        full = t.new_empty((sum(len(r) for r in rows),) + tuple(t.shape[1:]))
        for r, q in zip(rows, parts):
            full[r] = q
        return full
    if isinstance(owner, RowParallelLinear) and leaf == "weight":   # columns, in rank order
        parts = [torch.empty_like(t) for _ in range(n)]
        dist.all_gather(parts, t.contiguous(), group=group)
        return torch.cat(parts, dim=1)
    return t                                                # replicated: whole already


def full_state(stage, first_block: int, tp_group=None) -> dict:
    """This stage's parameters as full tensors under the one-process model's names."""
    split = tp_group is not None and dist.get_world_size(tp_group) > 1
    out = {}
    for name, p in stage.named_parameters():
        t = p.detach()
        if name.startswith("blocks."):
            _, j, rest = name.split(".", 2)
            if split:
                owner = stage.blocks[int(j)].get_submodule(rest.rsplit(".", 1)[0])
                t = _gather_full(owner, rest.rsplit(".", 1)[1], t, tp_group)
            name = f"blocks.{first_block + int(j)}.{_block_name(rest)}"
        elif name == "pos.pos.weight":          # labkit.capstone.cp.ShardedPositions' table
            name = "pos.weight"
        out[name] = t.clone()
    return out


def save(stage, first_block: int, step: int, path: str, tp_group=None) -> None:
    """On every rank (collective): the stage's full tensors and `step` (steps done) to `path`."""
    import torch.distributed.checkpoint as dcp
    state = full_state(stage, first_block, tp_group)
    state["step"] = torch.tensor(step)
    dcp.save(state, checkpoint_id=path)


def load(model, path: str) -> int:
    """Every parameter of the whole (one-process) `model` read from `path`, in place; returns
    the number of steps done when it was saved. Works in a rank or without a process group."""
    import torch.distributed.checkpoint as dcp
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["step"] = torch.tensor(0)
    dcp.load(state, checkpoint_id=path)
    step = int(state.pop("step"))
    model.load_state_dict(state)
    return step
