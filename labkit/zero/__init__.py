"""ZeRO stages 0 to 3 by hand (layer 3): memory falls, traffic rises, by the formulas.

    model, opt = labkit.zero.wrap(model, torch.optim.Adam, stage=2, lr=1e-3)   # inside a rank
    loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()

stage 0  DDP: full copies everywhere, gradients all-reduced                      (optim.py)
stage 1  optimizer state sharded: gradients reduce-scattered, own shard updated,
         parameters all-gathered (a ZeroRedundancyOptimizer-style optimizer)    (optim.py)
stage 2  + gradients sharded: reduce-scattered in backward, bucket by bucket     (stage2.py)
stage 3  + parameters sharded: each layer gathered before its forward and its
         backward, freed after; `model.parameters()` are this rank's shards     (stage3.py)
mixed_precision=True: bfloat16 parameters and gradients, fp32 masters and moments
(masters.py for stage 3). Stage 3 also takes policy=Policy(...) (policy.py): bf16 or fp16, with
the fp32 masters in the optimizer (DeepSpeed) or as the sharded parameters themselves (FSDP2).
`flat.py` holds the flat buffers and the collectives (labkit's ring
reduce-scatter on gloo, so the bytes are NCCL's); `accounting.py` the bytes each rank should
hold and send; `parity.py` one process on the global batch, and ZeRO against it.
"""
import torch

from labkit._lazy import lazy
from labkit.zero.optim import ZeroOptimizer, check_optimizer_class

STAGES = (0, 1, 2, 3)

__all__ = ["wrap", "ZeroOptimizer", "STAGES"]


def wrap(model: torch.nn.Module, optimizer_class, *, stage: int, mixed_precision: bool = False,
         group=None, bucket_mb: float = 25, reduce_dtype=None, prefetch: bool = False,
         policy=None, **optimizer_kwargs):
    """(model, optimizer) for ZeRO `stage` over `group` (every rank must call it).

    stage 0-2 return the same model object (its parameters now live in flat buffers) and a
    `ZeroOptimizer`; stage 3 returns a `Stage3` module whose parameters() are this rank's shards
    and a `MasterOptimizer`. reduce_dtype=torch.float32 reduces 16-bit gradients in fp32
    (twice the bytes); prefetch (stage 3) starts the next layer's all-gather early.
    policy (stage 3): a `labkit.zero.policy.Policy` (param_dtype bf16 or fp16, reduce_dtype, and
    the layout: 'masters', DeepSpeed's, or 'sharded', FSDP2's), instead of mixed_precision.
    """
    if isinstance(stage, bool) or stage not in STAGES:
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r} (0 = DDP, 1 = shard the "
                         "optimizer state, 2 = + gradients, 3 = + parameters)")
    check_optimizer_class(optimizer_class)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if getattr(model, "_labkit_zero", None) is not None:
        raise RuntimeError(f"this model is already wrapped (ZeRO stage {model._labkit_zero}); "
                           "wrap the original module once: build a fresh model to try another stage")
    import torch.distributed as dist
    if not dist.is_initialized():
        raise RuntimeError("labkit.zero.wrap runs inside a rank (cluster.run or %%ranks), where "
                           "the process group is ready")
    if policy is not None and (stage != 3 or mixed_precision or reduce_dtype is not None):
        raise ValueError("policy is for stage 3 and replaces mixed_precision and reduce_dtype: give "
                         "stage=3 and policy=Policy(param_dtype=..., reduce_dtype=..., layout=...) alone")
    if mixed_precision:
        with torch.no_grad():
            for p in model.parameters():
                if not p.requires_grad and p.is_floating_point():
                    p.data = p.data.to(torch.bfloat16)     # frozen: 16-bit like the rest
    if stage == 3:
        from labkit.zero.masters import MasterOptimizer
        from labkit.zero.stage3 import Stage3
        wrapped = Stage3(model, group, mixed_precision, prefetch=prefetch, reduce_dtype=reduce_dtype,
                         policy=policy)
        trainable = [g for g in wrapped.groups() if g.trainable]
        opt = MasterOptimizer([g.shard for g in trainable], optimizer_class,
                              mixed_precision=wrapped.mixed, owner=wrapped,
                              masters=[g.master_init for g in trainable], **optimizer_kwargs)
        for g in wrapped.groups():
            del g.master_init
        model._labkit_zero = wrapped._labkit_zero = 3
        opt.stage, opt.model = 3, wrapped
        return wrapped, opt
    with torch.no_grad():
        src = dist.get_global_rank(group, 0) if group is not None else 0
        for b in model.buffers():
            dist.broadcast(b, src, group=group)
    names = {id(p): n for n, p in model.named_parameters()}
    opt = ZeroOptimizer(model.parameters(), optimizer_class, stage=stage, group=group,
                        mixed_precision=mixed_precision, bucket_mb=bucket_mb,
                        reduce_dtype=reduce_dtype, names=names, **optimizer_kwargs)
    if mixed_precision:
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point() and p.dtype != torch.bfloat16:
                    p.data = p.data.to(torch.bfloat16)
    model._labkit_zero = stage
    opt.model = model
    return model, opt


__getattr__, __dir__ = lazy(__name__, {"Stage3": "stage3", "MasterOptimizer": "masters"})
