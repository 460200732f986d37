"""The notes' FSDP1 configuration, one full training step, measured (layer 3, inside a rank).

    r = cluster.run(labkit.fsdp.fsdp1.notes_step, wrap_blocks=False)

The notes build `FullyShardedDataParallel(model, sharding_strategy=FULL_SHARD, mixed_precision=
MixedPrecision(bf16, bf16, bf16), device_id=torch.cuda.current_device(), limit_all_gathers=True,
use_orig_params=True)`. We run it as written with device_id=cpu (gloo), for a forward, a
backward and an optimizer step, and compare the parameters with one process in fp32.

What the notes leave out: without an `auto_wrap_policy` FSDP1 makes the whole model ONE unit,
so every parameter is gathered at once (the peak is the full model, as if nothing were
sharded during compute). `wrap_blocks=True` adds `auto_wrap_policy=ModuleWrapPolicy({Block})`:
one unit per transformer block plus the root (embeddings, final norm). Then the peak is the
root plus two blocks: in backward FSDP1's default `backward_prefetch=BACKWARD_PRE` gathers the
previous block while the current one is still gathered; the root stays gathered from forward to
the end of backward (FSDP1 does not free the root after forward). `peak_gathered` is the most bytes of gathered
(unsharded) flat parameters this rank held at once, sampled at every operator of the step.

Parity is judged with SGD (its update is linear in the gradient): the bf16 step must land within
`PARITY_FRACTION` of the distance the fp32 reference moved; a step that did nothing is off by
100 % of it.
"""
import copy
import warnings

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

PARITY_FRACTION = 0.05
LR = 0.5


def gathered_bytes(model) -> int:
    """Bytes of unsharded flat parameters FSDP1 holds on this rank now (private; tested on torch 2.13:
    each handle's `_full_param_padded`, plus its fp32 twin when one is allocated)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    total = 0
    for m in FSDP.fsdp_modules(model):
        fp = m._handle.flat_param if m._handle is not None else None
        for name in ("_full_param_padded", "_full_prec_full_param_padded"):
            t = getattr(fp, name, None)
            if t is not None:
                total += t.untyped_storage().nbytes()
    return total


class PeakGathered(TorchDispatchMode):
    """Samples `gathered_bytes(model)` at every operator (forward and backward run on this
    thread on CPU); `.peak` is the largest sample."""

    def __init__(self, model):
        super().__init__()
        self.model, self.peak = model, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, gathered_bytes(self.model))
        return out


def notes_step(wrap_blocks: bool = False, n_layer: int = 4, batch_per_rank: int = 4,
               lr: float = LR) -> dict:
    """One training step of the notes' FSDP1 configuration on this rank's slice of the batch,
    beside one fp32 process on the whole batch (see the module docstring)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import Block, lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = tiny_gpt(n_layer=n_layer)
    init = {k: v.detach().clone() for k, v in ref.named_parameters()}
    model = copy.deepcopy(ref)
    mp_policy = MixedPrecision(
        param_dtype=torch.bfloat16,
        reduce_dtype=torch.bfloat16,
        buffer_dtype=torch.bfloat16,
    )
    extra = {"auto_wrap_policy": ModuleWrapPolicy({Block})} if wrap_blocks else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = FSDP(
            model,
            sharding_strategy=ShardingStrategy.FULL_SHARD,   # 等价 ZeRO-3
            mixed_precision=mp_policy,
            device_id=torch.device("cpu"),                    # the notes: torch.cuda.current_device()
            limit_all_gathers=True,     # 限制并发 all-gather，省显存
            use_orig_params=True,       # 保留原始参数视图，便于优化器分组
            **extra,
        )
    deprecated = [str(w.message).splitlines()[0] for w in caught if issubclass(w.category, FutureWarning)]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = batch(n, batch_per_rank)
    mine = slice(batch_per_rank * r, batch_per_rank * (r + 1))
    with PeakGathered(model) as meter:
        loss = lm_loss(model(x[mine]), y[mine])
        loss.backward()
        opt.step()
    opt.zero_grad()
    ref_loss = lm_loss(ref(x), y)                       # one process, fp32, the whole batch
    ref_loss.backward()
    torch.optim.SGD(ref.parameters(), lr=lr).step()
    total = loss.detach().float().clone()
    dist.all_reduce(total)
    with FSDP.summon_full_params(model):
        full = {k.replace("_fsdp_wrapped_module.", ""): v.detach().float().clone()
                for k, v in model.named_parameters()}
    want = dict(ref.named_parameters())
    diff = max((full[k] - want[k].detach()).abs().max().item() for k in want)
    moved = max((want[k].detach() - init[k]).abs().max().item() for k in want)
    handles = [m._handle for m in FSDP.fsdp_modules(model) if m._handle is not None]
    model_bytes_bf16 = 2 * ref.num_params()
    return {"rank": r, "wrap_blocks": wrap_blocks, "units": len(handles),
            "loss_dtype": str(loss.dtype), "mean_loss": total.item() / n,
            "one_process_fp32_loss": ref_loss.item(), "deprecation": deprecated[:1],
            "local_flat": sum(h.flat_param.numel() for h in handles),
            "padded_total": sum(h.flat_param._padded_unsharded_size.numel() for h in handles),
            "model_params": ref.num_params(), "max_diff": diff, "moved": moved,
            "parity_ok": diff <= PARITY_FRACTION * moved,
            "peak_gathered": meter.peak, "model_bytes_bf16": model_bytes_bf16,
            "unit_bytes_bf16": [2 * h.flat_param._padded_unsharded_size.numel() for h in handles]}
