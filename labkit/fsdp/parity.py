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
"""
import copy

import torch
import torch.distributed as dist


def zero3_vs_fsdp2(steps: int = 2, batch_per_rank: int = 2, lr: float = 1e-3) -> dict:
    from labkit.fsdp import apply
    from labkit.fsdp.runs import tiny_gpt
    from labkit.memory import measure
    from labkit.models import lm_loss
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
