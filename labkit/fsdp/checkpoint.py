"""Sharded checkpoints with torch.distributed.checkpoint (DCP), resumed on any world size.

    cluster.run(labkit.fsdp.checkpoint.train_and_save, path, steps=2)   # 4 ranks write shards
    cluster2.run(labkit.fsdp.checkpoint.resume_and_step, path)          # 2 ranks read them

Each rank writes only its own shards (`dcp.save` with `get_state_dict`: the model's and the
optimizer's, as DTensors); loading reshards to the new world size, so a run saved on 4 ranks
resumes on 2 and takes the same next step. The global batch is the same whatever the world size
(each rank takes its slice), so the next step's parameters must match to float precision.
`full_state_dict` gives the unsharded model for one process (the "full state dict" route).
"""
import copy

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                     set_state_dict)

LR = 1e-2


def _setup():
    from labkit.fsdp.apply import shard
    from labkit.fsdp.runs import tiny_gpt
    ref, batch = tiny_gpt()
    model = shard(copy.deepcopy(ref), wrap="block", log=False)
    return model, torch.optim.Adam(model.parameters(), lr=LR), batch


def _step(model, opt, batch, step: int):
    """One Adam step on this rank's slice of the same 8 sequences."""
    from labkit.toy_models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    x, y = batch(1, 8)                     # 8 sequences in all, whatever the world size
    per = 8 // n
    x, y = x[per * r:per * (r + 1)], y[per * r:per * (r + 1)]
    lm_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()


def full_state_dict(model) -> dict:
    """The unsharded parameters on every rank (gathered), as one process would hold them."""
    return {k: v.full_tensor().clone() if hasattr(v, "full_tensor") else v.clone()
            for k, v in model.state_dict().items()}


def train_and_save(path: str, steps: int = 2) -> dict:
    """Train `steps` steps, save a sharded checkpoint to `path`, take one more step; return the
    parameters after that step (full) and how many bytes of shards this rank wrote."""
    import os
    model, opt, batch = _setup()
    for s in range(steps):
        _step(model, opt, batch, s)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    dist.barrier()
    _step(model, opt, batch, steps)
    files = [f for f in os.listdir(path) if f.endswith(".distcp")]
    return {"after_next_step": full_state_dict(model), "shard_files": len(files),
            "world_size": dist.get_world_size()}


def resume_and_step(path: str, steps: int = 2) -> dict:
    """Build a fresh sharded model, load the checkpoint (resharded to this world size), take the
    next step; return the full parameters after it."""
    model, opt, batch = _setup()
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    _step(model, opt, batch, steps)
    return {"after_next_step": full_state_dict(model), "world_size": dist.get_world_size()}


def full_state_shapes() -> dict:
    """The full-state-dict route: every rank gets the unsharded model state (gathered, on CPU),
    as one process saves it with torch.save; returns each tensor's full shape."""
    model, opt, _ = _setup()
    msd, _ = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: tuple(v.shape) for k, v in msd.items()}
