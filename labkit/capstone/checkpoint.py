"""Save a capstone run with torch.distributed.checkpoint, load it into any other layout.

Each rank contributes its stage's parameters as full tensors under the one-process model's
names ("blocks.1.qkv.weight"): a TP-split weight is gathered over the TP group first, so the
files do not depend on the layout, and DCP writes each key once (the DP, CP and TP replicas
hold the same tensor). Loading builds the one-process model and reads every key into it; the
new layout then cuts and splits it as usual. (The optimizer is plain SGD: no state to save.)
"""
import torch
import torch.distributed as dist


def _full_blocks(stage, idx, grid) -> dict:
    from labkit.tp.layers import ColumnParallelLinear, RowParallelLinear
    out = {}
    tp_group = grid.groups.get("tp") if grid.tp > 1 else None
    for j, blk in zip(idx, stage.blocks):
        for name, p in blk.named_parameters():
            key = f"blocks.{j}.{name.replace('attn.', '').replace('mlp.', '')}"
            t = p.detach()
            if tp_group is not None:
                owner = blk.get_submodule(name.rsplit(".", 1)[0])
                if isinstance(owner, ColumnParallelLinear):
                    parts = [torch.empty_like(t) for _ in range(grid.tp)]
                    rows = [torch.empty_like(owner.rows) for _ in range(grid.tp)]
                    dist.all_gather(parts, t.contiguous(), group=tp_group)
                    dist.all_gather(rows, owner.rows.contiguous(), group=tp_group)
                    full = t.new_empty((sum(len(r) for r in rows),) + t.shape[1:])
                    for r, q in zip(rows, parts):
                        full[r] = q
                    t = full
                elif isinstance(owner, RowParallelLinear) and name.endswith("weight"):
                    parts = [torch.empty_like(t) for _ in range(grid.tp)]
                    dist.all_gather(parts, t.contiguous(), group=tp_group)
                    t = torch.cat(parts, dim=1)
            out[key] = t.clone()
    return out


def save(stage, idx, grid, step: int, path: str) -> None:
    """On every rank (collective): this stage's full tensors and the step, to `path`."""
    import torch.distributed.checkpoint as dcp
    state = _full_blocks(stage, idx, grid)
    for prefix, mod in (("tok", stage.tok), ("ln_f", stage.ln_f), ("head", stage.head)):
        if mod is not None:
            for n, p in mod.named_parameters():
                state[f"{prefix}.{n}"] = p.detach().clone()
    state["step"] = torch.tensor(step)
    dcp.save(state, checkpoint_id=path)


def load_full(model, path: str) -> int:
    """Read every parameter of the one-process `model` from `path` (in place); the step saved."""
    import torch.distributed.checkpoint as dcp
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state["step"] = torch.tensor(0)
    dcp.load(state, checkpoint_id=path)
    step = int(state.pop("step"))
    model.load_state_dict(state)
    return step
