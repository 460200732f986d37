"""The notes' convergence checklist (收敛性问题的排查), run as far as the ranks allow.

    单卡小规模能收敛吗？  does one rank, alone, learn a small task?  (rules out data and model bugs)
    梯度范数是否正常？    is the gradient norm finite and moderate after the all-reduce?
    学习率缩放了吗？      does the learning rate follow a scaling rule for the global batch?
    随机种子是否同步？    same initial weights and sampler seed on every rank (dropout masks may differ)

`convergence_checklist(lr, base_lr=..., base_batch=..., batch=...)` runs on every rank and
returns [(item, ok, detail)], the same on every rank.
"""
import math

import torch
import torch.distributed as dist

from labkit.doctor import pitfalls
from labkit.i18n import tr

ITEMS = ("single-rank sanity", "gradient norm", "learning-rate rule", "seeds in sync")


def _single_rank_sanity(steps: int = 40, lr: float = 0.05, batch: int = 16):
    """Train a fresh model on this rank alone (no communication) on a learnable toy task."""
    from labkit.ddp.lr_scaling import _task
    from labkit.models import AwkwardNet, lm_loss
    torch.manual_seed(0)
    model = AwkwardNet()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = _task(steps * batch, seed=11)
    losses = []
    for s in range(steps):
        loss = lm_loss(model(x[s * batch:(s + 1) * batch]), y[s * batch:(s + 1) * batch])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    ok = last < 0.7 * first
    return ok, tr("loss {first:.2f} -> {last:.2f} in {steps} steps on one rank", first=first, last=last,
                  steps=steps) + \
        ("" if ok else tr(": it does not learn alone; fix the data or the model before scaling out"))


def _gradient_norm(batch: int, max_norm: float):
    """One data-parallel backward (gradients all-reduced); the global gradient norm."""
    from labkit.ddp.data_parallel import FlatDDP
    from labkit.ddp.lr_scaling import _task
    from labkit.models import AwkwardNet, lm_loss
    torch.manual_seed(0)
    ddp = FlatDDP(AwkwardNet())
    x, y = _task(batch * dist.get_world_size(), seed=12)
    mine = slice(dist.get_rank() * batch, (dist.get_rank() + 1) * batch)
    lm_loss(ddp(x[mine]), y[mine]).backward()
    ddp.sync_gradients()
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ddp.module.parameters()
                                                 if p.grad is not None])).item()
    ok = math.isfinite(norm) and norm < max_norm
    return ok, tr("global gradient norm {norm:.3g}", norm=norm) + (
        "" if ok else tr(" (above {max_norm:g} or not finite: clip it, lower the learning rate, check "
                         "the loss scale)", max_norm=max_norm))


def convergence_checklist(lr: float, base_lr: float, base_batch: int, batch: int,
                          weights_seed_by_rank: bool = False, max_norm: float = 100.0) -> list:
    """On every rank: the four items of the checklist, [(item, ok, detail)].
    lr: the learning rate used with `batch` per rank; base_lr: the one tuned at base_batch."""
    from labkit.comm.objects import all_gather_json
    from labkit.doctor.ranks import seed_probe
    out = [(tr(ITEMS[0]), *_single_rank_sanity())]
    out.append((tr(ITEMS[1]), *_gradient_norm(batch, max_norm)))
    out.append((tr(ITEMS[2]), *pitfalls.lr_rule(lr, base_lr, base_batch, batch * dist.get_world_size())))
    mine = seed_probe(weights_seed_by_rank=weights_seed_by_rank)
    every = all_gather_json(mine)                 # tensors, not pickles: comm/objects.py
    out.append((tr(ITEMS[3]), *pitfalls.seeds_ok([e["weights"] for e in every],
                                             [e["sampler_seed"] for e in every],
                                             [e["dropout"] for e in every])))
    return out
