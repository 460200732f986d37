"""Mixed precision and CPU offload under FSDP2, against labkit.memory.model_states (layer 3).

    r = cluster.run(labkit.fsdp.precision.state_report, precision="bf16", offload=True)

How FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16) maps onto the formula's
'mixed' categories (ZeRO paper: 2 + 2 + 12 bytes per parameter), per rank, sharded over N:

    formula (mixed, ZeRO-3)        FSDP2 with bf16 policy
    params   bf16 2Ψ/N             params   fp32 4Ψ/N: the sharded parameter IS the fp32 master
    master   fp32 4Ψ/N             (none: no separate copy)
    grads    bf16 2Ψ/N             grads    fp32 4Ψ/N: reduced in bf16, then cast to the parameter's dtype
    momentum, variance 8Ψ/N        momentum, variance 8Ψ/N (Adam on the fp32 shards)

The totals agree (16Ψ/N); the categories do not (6 bytes move from params+master and grads
into fp32 params and fp32 grads). Beyond the states, FSDP2 casts each unit to bf16 when it
gathers it: 2 bytes per parameter of the unit, for as long as the unit is gathered (the peak,
labkit.fsdp.runs.peak_report). On the wire, bf16 halves both the all-gathers and the
reduce-scatters (measured here from the logged collectives).

CPU offload (CPUOffloadPolicy) keeps the sharded parameters, their gradients and so Adam's
state in host memory and copies a unit to the device only to gather it. On this CPU-only
machine there is no device to leave: the report is accounting of which measured bytes would
leave the GPU (all model states) and which stay (gathered units, activations), beside the
formula's offload=True. That is ZeRO-Offload (Ren et al., arXiv 2101.06840): the fp16
gradients go to the CPU bucket by bucket during backward, the fp32 optimizer step (master and
Adam's moments) runs on the CPU, and the GPU keeps the fp16 parameters.
"""
import copy

import torch
import torch.distributed as dist

from labkit.fsdp import apply
from labkit.fsdp.runs import MODELS, mp_policy


def state_report(precision: str = "bf16", offload: bool = False, model: str = "tiny_gpt",
                 batch_per_rank: int = 4) -> dict:
    from labkit.memory import measure, model_states
    from labkit.toy_models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = MODELS[model]()
    m = apply.shard(copy.deepcopy(ref), wrap="block", strategy="full", mp_policy=mp_policy(precision),
                    offload=offload)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x, y = batch(n, batch_per_rank)
    mine = slice(batch_per_rank * r, batch_per_rank * (r + 1))
    apply.comm_log(m, clear=True)
    loss = lm_loss(m(x[mine]), y[mine])
    loss.backward()
    log = apply.comm_log(m)
    opt.step()
    held = measure(m, opt)
    n_params = ref.num_params() if hasattr(ref, "num_params") else sum(p.numel() for p in ref.parameters())
    wire = {k: sum(c["bytes"] for c in log if c["kind"] == k) for k in ("all_gather", "reduce_scatter")}
    devices = {str(p.to_local().device) for p in m.parameters()}
    return {"rank": r, "precision": precision, "offload": offload, "measured": held,
            "formula": model_states(n_params, precision="mixed" if precision == "bf16" else "fp32",
                                    zero_stage=3, world_size=n),
            "formula_offload": model_states(n_params, precision="mixed" if precision == "bf16" else "fp32",
                                            zero_stage=3, world_size=n, offload=True),
            "n_params": n_params, "wire": wire, "loss_dtype": str(loss.dtype),
            "param_dtype": str(next(m.parameters()).dtype), "shard_devices": sorted(devices),
            # what CPUOffloadPolicy would keep off the GPU: every model state this rank holds
            "would_leave_gpu": held.total if offload else 0}
