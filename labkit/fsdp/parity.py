"""FSDP2 beside labkit's own ZeRO-3 (module 04) and one process (layer 3).

    r = cluster.run(labkit.fsdp.parity.zero3_vs_fsdp2)

The same TinyGPT, the same global batch, two Adam steps three ways: one process on the whole
batch, FSDP2 (fully_shard per block) and labkit.zero stage 3 (Stage3, per block) on this rank's
slice. Both sharded runs must take the first step of one process, within its derived bound
(numerics.one_step_over_bound, element by element: Adam's later steps have none); both hold a 1/N shard
of parameters, gradients and Adam's two moments. Their per-rank bytes differ only by padding:
FSDP2 rounds each parameter's first dimension up to a multiple of N, labkit's Stage3 pads each
unit's flat buffer to a multiple of N elements (and keeps a step counter per unit, not per
parameter).

    r = cluster.run(labkit.fsdp.parity.beside_fsdp2, torch.bfloat16)

`beside_fsdp2`: one backward of FSDP2 under MixedPrecisionPolicy beside labkit.zero stage 3 under
Policy(..., 'sharded'): gradients, dtypes and the bytes of each kind of collective.
"""
import copy

import torch
import torch.distributed as dist


def zero3_vs_fsdp2(steps: int = 2, batch_per_rank: int = 2, lr: float = 1e-3) -> dict:
    from labkit.fsdp import apply
    from labkit.fsdp.runs import tiny_gpt
    from labkit.memory import measure
    from labkit.toy_models import lm_loss
    from labkit.zero import wrap
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = tiny_gpt()
    f2 = apply.shard(copy.deepcopy(ref), wrap="block", strategy="full", log=False)
    z3, zopt = wrap(copy.deepcopy(ref), torch.optim.Adam, stage=3, lr=lr)
    fopt = torch.optim.Adam(f2.parameters(), lr=lr)
    ropt = torch.optim.Adam(ref.parameters(), lr=lr)
    x, y = batch(n, batch_per_rank)
    mine = slice(batch_per_rank * r, batch_per_rank * (r + 1))
    over = {}
    for step in range(steps):
        for model, opt, xs, ys in ((f2, fopt, x[mine], y[mine]), (z3, zopt, x[mine], y[mine]),
                                   (ref, ropt, x, y)):
            lm_loss(model(xs), ys).backward()
            if model is ref and step == 0:
                grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                         for k, p in ref.named_parameters()}
            opt.step()
            if model is ref and step == 0:
                # the first Adam step against its derived bound: each gradient a sum over the
                # global batch's y.numel() tokens, added in another order on the ranks
                from labkit.numerics import one_step_over_bound
                want = {k: v.detach() for k, v in ref.named_parameters()}
                got_f = {k: v.full_tensor() for k, v in f2.state_dict().items()}
                got_z = z3.full_parameters()
                over["fsdp2"] = one_step_over_bound(got_f, want, grads, y.numel(), lr, "adam")
                over["zero3"] = one_step_over_bound(got_z, {k: v for k, v in want.items() if k in got_z},
                                                    grads, y.numel(), lr, "adam")
            if model is not ref:
                held = measure(model, opt)
                if model is f2:
                    f2_held = held
                else:
                    z3_held = held
            opt.zero_grad(set_to_none=False) if model is not ref else opt.zero_grad()
    truth = {k: v for k, v in ref.named_parameters()}
    fsdp = {k: v.full_tensor() for k, v in f2.state_dict().items()}
    zero = z3.full_parameters()
    err_f = max((fsdp[k] - v).abs().max().item() for k, v in truth.items())
    err_z = max((zero[k] - v).abs().max().item() for k, v in truth.items() if k in zero)
    # fsdp2_err, zero3_err: after the last step, shown only (no derived bound past the first)
    return {"rank": r, "world_size": n, "fsdp2_err": err_f, "zero3_err": err_z,
            "fsdp2_over_bound": over["fsdp2"], "zero3_over_bound": over["zero3"],
            "zero3_names_missing": sorted(set(truth) - set(zero)),
            "fsdp2": f2_held, "zero3": z3_held, "n_params": ref.num_params()}


def beside_fsdp2(param_dtype=torch.bfloat16, reduce_dtype=None, batch_per_rank: int = 2) -> dict:
    """Inside a rank: one forward and backward of the same TinyGPT on this rank's slice of one
    global batch, with FSDP2 (fully_shard per block and the root, MixedPrecisionPolicy, labkit's
    ring reduce-scatter on gloo as labkit.zero uses) and with labkit.zero stage 3 under
    Policy(param_dtype, reduce_dtype, 'sharded'). Returns the largest gradient difference, the
    dtypes of the parameters and gradients each leaves, and the bytes each step's collectives
    carry, by kind and dtype (full tensors, padding included: `padding` says how much each adds)."""
    import copy

    from torch.distributed.fsdp import MixedPrecisionPolicy

    from labkit.fsdp import apply
    from labkit.fsdp.runs import tiny_gpt as fsdp_gpt
    from labkit.toy_models import lm_loss
    from labkit.zero import wrap
    from labkit.zero.policy import Policy
    from labkit.zero.precision_runs import _log_collectives, full_grads
    rank, n = dist.get_rank(), dist.get_world_size()
    ref, batch = fsdp_gpt()
    x, y = batch(n, batch_per_rank)
    mine = slice(batch_per_rank * rank, batch_per_rank * (rank + 1))
    f2 = apply.shard(copy.deepcopy(ref), wrap="block", ring=True,
                     mp_policy=MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype))
    z3, _ = wrap(copy.deepcopy(ref), torch.optim.SGD, stage=3, lr=0.1,
                 policy=Policy(param_dtype, reduce_dtype, "sharded"))
    lm_loss(f2(x[mine]).float(), y[mine]).backward()
    log = []
    undo = _log_collectives(log)
    lm_loss(z3(x[mine]).float(), y[mine]).backward()
    undo()
    fg = {k: p.grad.full_tensor() for k, p in f2.named_parameters()}
    zg = full_grads(z3)
    diff = max(float((fg[k] - zg[k]).abs().max()) for k in zg)
    size = lambda d: getattr(torch, d).itemsize    # noqa: E731
    rd = str(reduce_dtype or param_dtype).replace("torch.", "")
    pd = str(param_dtype).replace("torch.", "")
    ours = {}
    for kind, dtype, numel in log:
        key = (kind, dtype)
        ours[key] = ours.get(key, 0) + numel * size(dtype)
    theirs = {}
    for rec in apply.comm_log(f2):
        key = (rec["kind"].replace("_", "-"), pd if rec["kind"] == "all_gather" else rd)
        theirs[key] = theirs.get(key, 0) + rec["bytes"]
    numel = sum(p.numel() for p in ref.parameters())
    return dict(rank=rank, max_grad_diff=diff, names=sorted(zg) == sorted(fg),
                max_grad=max(float(g.abs().max()) for g in fg.values()),
                grad_dtypes={"fsdp2": sorted({str(g.dtype) for g in fg.values()}),
                             "labkit": sorted({str(g.dtype) for g in zg.values()})},
                param_dtypes={"fsdp2": sorted({str(p.dtype) for p in f2.parameters()}),
                              "labkit": sorted({str(p.dtype) for p in z3.parameters()})},
                fsdp2_bytes=theirs, labkit_bytes=ours,
                unpadded={"all-gather": 2 * numel * size(pd), "reduce-scatter": numel * size(rd)})
