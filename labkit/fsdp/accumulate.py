"""Gradient accumulation under FSDP, with and without a reduction per micro-batch (layer 3).

    rows = cluster.run(labkit.fsdp.accumulate.accumulate, api="fsdp2", skip_sync=True)

`micro` micro-batches per step on each rank. With skip_sync=True the first micro-1 backwards
keep their gradients unreduced and unsharded on the rank (FSDP2:
`model.set_requires_gradient_sync(False)`; FSDP1: `with model.no_sync():`), and only the last
one reduce-scatters; with skip_sync=False every micro-batch reduce-scatters and the shards add
up. Both give the gradient of one process on the whole batch. What skipping costs and saves,
measured on this rank per micro-batch: bytes sent (labkit.comm.traffic) and bytes of gradient
held after it (FSDP2: the unsharded gradients it keeps plus the sharded ones; FSDP1: the
flat gradients, which no_sync keeps unsharded).
"""
import contextlib
import copy
import warnings

import torch
import torch.distributed as dist


def unsharded_grad_bytes(model) -> int:
    """Bytes of the full-size gradients FSDP2 keeps between backwards that did not reduce."""
    from torch.distributed.fsdp import FSDPModule
    total = 0
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        for group in m._get_fsdp_state()._fsdp_param_groups:     # private; tested on torch 2.13
            for fp in group.fsdp_params:
                for g in (getattr(fp, "unsharded_accumulated_grad", None),
                          getattr(getattr(fp, "_unsharded_param", None), "grad", None)):
                    if g is not None:
                        total += g.numel() * g.element_size()
    return total


def _sharded_grad_bytes(model) -> int:
    total = 0
    for p in {id(p): p for p in model.parameters()}.values():
        g = p.grad
        if g is not None:
            g = g.to_local() if hasattr(g, "to_local") else g
            total += g.numel() * g.element_size()
    return total


def accumulate(api: str = "fsdp2", skip_sync: bool = True, micro: int = 4, per_micro: int = 2,
               lr: float = 0.1) -> dict:
    """One accumulated SGD step on this rank; returns per micro-batch bytes sent and gradient
    bytes held, the reduce-scatters made, and the largest parameter difference from one process
    trained on the whole global batch (n ranks x micro x per_micro sequences)."""
    from labkit.comm import traffic
    from labkit.fsdp import apply
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import lm_loss
    if api not in ("fsdp1", "fsdp2"):
        raise ValueError(f"api must be 'fsdp1' or 'fsdp2', got {api!r}")
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = tiny_gpt()
    model = copy.deepcopy(ref)
    if api == "fsdp2":
        apply.shard(model, wrap="block", strategy="full")
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        from labkit.toy_models import Block
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)         # FSDP1 is deprecated
            model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=torch.device("cpu"),
                         auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    X, Y = batch(n, micro * per_micro)
    x, y = (t[micro * per_micro * r: micro * per_micro * (r + 1)] for t in (X, Y))
    rows = []
    for i in range(micro):
        last = i == micro - 1
        ctx = contextlib.nullcontext()
        if api == "fsdp2":
            model.set_requires_gradient_sync(last or not skip_sync)
            apply.comm_log(model, clear=True)
        elif skip_sync and not last:
            ctx = model.no_sync()
        s = slice(i * per_micro, (i + 1) * per_micro)
        with traffic.measure(sync=True) as t, ctx:
            (lm_loss(model(x[s]), y[s]) / micro).backward()
        row = {"micro": i, "sent": t.sent}
        if api == "fsdp2":
            row["reduce_scatters"] = apply.counts(apply.comm_log(model))["reduce_scatter"]
            row["unsharded_grads"] = unsharded_grad_bytes(model)
            row["sharded_grads"] = _sharded_grad_bytes(model)
        else:     # FSDP1 flat gradients: unsharded under no_sync, a shard after a reduction
            row["grads"] = sum(p.grad.numel() * p.grad.element_size()
                               for p in model.parameters() if p.grad is not None)
        rows.append(row)
    opt.step()
    lm_loss(ref(X), Y).backward()
    grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach()
             for k, p in ref.state_dict(keep_vars=True).items()}
    torch.optim.SGD(ref.parameters(), lr=lr).step()
    if api == "fsdp2":
        full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        with FSDP.summon_full_params(model):
            full = {k.replace("_fsdp_wrapped_module.", ""): v.detach().clone()
                    for k, v in model.state_dict().items()}
    err = max((full[k] - v).abs().max().item() for k, v in ref.state_dict().items())
    model_bytes = sum(p.numel() * 4 for p in {id(p): p for p in ref.parameters()}.values())
    from labkit.numerics import one_step_over_bound      # derived: fp32 sums over X's tokens, one SGD step
    over = one_step_over_bound(full, ref.state_dict(), grads, X.numel(), lr, "sgd")
    return {"rank": r, "api": api, "skip_sync": skip_sync, "rows": rows, "max_err": err,
            "err_over_bound": over,
            "model_bytes": model_bytes, "sent": sum(row["sent"] for row in rows)}
