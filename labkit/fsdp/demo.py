"""Notebook 05's runs that are not measurements of one idea: the live memory figure during FSDP
steps and the notes' FSDP1 configuration run as written (layer 3)."""
import copy
import warnings

import torch
import torch.distributed as dist


def gathered_bytes(model) -> int:
    """Bytes of full (all-gathered) parameters FSDP2 holds on this rank at this moment."""
    from torch.distributed.fsdp import FSDPModule
    total = 0
    for m in model.modules():
        if isinstance(m, FSDPModule):
            for group in m._get_fsdp_state()._fsdp_param_groups:       # private, torch 2.6-2.13
                for fp in group.fsdp_params:
                    total += sum(t.untyped_storage().nbytes() for t in getattr(fp, "all_gather_outputs", []))
    return total


def live_steps(strategy: str = "full", wrap: str = "block", steps: int = 2, batch_per_rank: int = 4,
               n_layer: int = 4):
    """A few FSDP2 steps emitting this rank's memory by category after forward, during backward
    and after the step (labkit.memory.live.Meter; 'gathered' = full parameters held now)."""
    from labkit.fsdp.apply import shard
    from labkit.fsdp.runs import tiny_gpt
    from labkit.memory.live import Meter
    from labkit.models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    model, batch = tiny_gpt(n_layer=n_layer)
    shard(model, wrap=wrap, strategy=strategy, log=False)
    model.gathered_bytes = lambda: gathered_bytes(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = batch(n, batch_per_rank)
    x, y = x[batch_per_rank * r:batch_per_rank * (r + 1)], y[batch_per_rank * r:batch_per_rank * (r + 1)]
    return Meter(model, opt).train([(x, y)] * steps, lm_loss, probe=model.blocks[len(model.blocks) // 2])


def notes_fsdp1_config() -> dict:
    """The notes' FSDP1 configuration, as written, with device_id=cpu (this machine has no GPU):
    FULL_SHARD, MixedPrecision(bf16 params, reductions and buffers), limit_all_gathers=True,
    use_orig_params=True; one training step, compared with one process in fp32."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from labkit.fsdp.runs import tiny_gpt
    from labkit.models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = tiny_gpt()
    model = copy.deepcopy(ref)
    mp_policy = MixedPrecision(
        param_dtype=torch.bfloat16,
        reduce_dtype=torch.bfloat16,
        buffer_dtype=torch.bfloat16,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = FSDP(
            model,
            sharding_strategy=ShardingStrategy.FULL_SHARD,   # 等价 ZeRO-3
            mixed_precision=mp_policy,
            device_id=torch.device("cpu"),                    # the notes: torch.cuda.current_device()
            limit_all_gathers=True,     # 限制并发 all-gather，省显存
            use_orig_params=True,       # 保留原始参数视图，便于优化器分组
        )
    deprecated = [str(w.message).splitlines()[0] for w in caught if issubclass(w.category, FutureWarning)]
    x, y = batch(n, 4)
    loss = lm_loss(model(x[4 * r:4 * r + 4]), y[4 * r:4 * r + 4])
    ref_loss = lm_loss(ref(x), y)
    total = loss.detach().float().clone()
    dist.all_reduce(total)
    return {"rank": r, "loss_dtype": str(loss.dtype), "mean_loss": total.item() / n,
            "one_process_fp32_loss": ref_loss.item(), "deprecation": deprecated[:1],
            "local_params": sum(p.numel() for p in model.parameters()), "model_params": ref.num_params()}
