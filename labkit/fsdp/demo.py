"""Notebook 05's live memory figure during FSDP steps (layer 3). The notes' FSDP1 configuration
is `labkit.fsdp.fsdp1`."""
import torch
import torch.distributed as dist


def gathered_storages(model) -> list:
    """The storages of the full (all-gathered) parameters FSDP2 holds on this rank now."""
    from torch.distributed.fsdp import FSDPModule
    out = []
    for m in model.modules():
        if isinstance(m, FSDPModule):
            for group in m._get_fsdp_state()._fsdp_param_groups:       # private; tested on torch 2.13
                for fp in group.fsdp_params:
                    out += [t.untyped_storage() for t in getattr(fp, "all_gather_outputs", [])]
    return out


def gathered_bytes(model) -> int:
    """Bytes of full (all-gathered) parameters FSDP2 holds on this rank at this moment."""
    return sum(st.nbytes() for st in gathered_storages(model))


def live_steps(strategy: str = "full", wrap: str = "block", steps: int = 2, batch_per_rank: int = 4,
               n_layer: int = 4):
    """A few FSDP2 steps emitting this rank's memory by category after forward, during backward
    and after the step (labkit.memory.live.Meter; 'gathered' = full parameters held now)."""
    from labkit.fsdp.apply import shard
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import lm_loss
    from labkit.zero.demo import exact_meter
    n, r = dist.get_world_size(), dist.get_rank()
    model, batch = tiny_gpt(n_layer=n_layer)
    shard(model, wrap=wrap, strategy=strategy, log=False)
    model.gathered_bytes = lambda: gathered_bytes(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = batch(n, batch_per_rank)
    x, y = x[batch_per_rank * r:batch_per_rank * (r + 1)], y[batch_per_rank * r:batch_per_rank * (r + 1)]
    meter = exact_meter(model, opt, lambda: gathered_storages(model))
    return meter.train([(x, y)] * steps, lm_loss, probe=model.blocks[len(model.blocks) // 2])
