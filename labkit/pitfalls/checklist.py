"""The notes' convergence checklist (收敛性问题的排查), run as far as the ranks allow.

    单卡小规模能收敛吗？  does one rank, alone, learn a small task?  (rules out data and model bugs)
    梯度范数是否正常？    is the gradient norm finite and moderate after the all-reduce, and one process's?
    学习率缩放了吗？      does the learning rate follow a scaling rule for the global batch?
    随机种子是否同步？    same initial weights and sampler seed on every rank (dropout masks may differ)

`convergence_checklist(lr, base_lr=..., base_batch=..., batch=...)` runs on every rank and
returns [(item, ok, detail)], the same on every rank.
"""
import math

import torch
import torch.distributed as dist

from labkit.pitfalls import detectors as pitfalls
from labkit.i18n import N_, tr

ITEMS = (N_("single-rank sanity"), "gradient norm", N_("learning-rate rule"), N_("seeds in sync"))


def _single_rank_sanity(steps: int = 40, lr: float = 0.05, batch: int = 16, shuffled_labels: bool = False,
                        frozen: bool = False):
    """Train a fresh model on this rank alone (no communication) on a learnable toy task.
    `shuffled_labels` (targets permuted across the samples: nothing left to learn) and `frozen`
    (no parameter trains) are the two ways this item must say no (tests/pitfalls/test_pitfalls.py)."""
    from labkit.ddp.lr_scaling import _task
    from labkit.toy_models import AwkwardNet, lm_loss
    torch.manual_seed(0)
    model = AwkwardNet()
    if frozen:
        model.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=lr) if trainable else None
    x, y = _task(steps * batch, seed=11)
    if shuffled_labels:
        y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(11))]
    losses = []
    for s in range(steps):
        loss = lm_loss(model(x[s * batch:(s + 1) * batch]), y[s * batch:(s + 1) * batch])
        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    # learning means beating chance: a model that ignores its input can still learn how often each
    # target occurs (shuffled labels: loss about log(vocab)); half of that is learning from x
    chance = math.log(model.head.out_features)
    ok = last < 0.5 * chance
    numbers = dict(first=first, last=last, steps=steps, vocab=model.head.out_features, chance=chance)
    return ok, (tr("loss {first:.2f} -> {last:.2f} in {steps} steps on one rank (chance: log {vocab} = "
                   "{chance:.2f})", **numbers) if ok else
                tr("loss {first:.2f} -> {last:.2f} in {steps} steps on one rank (chance: log {vocab} = "
                   "{chance:.2f}): it does not learn alone; fix the data or the model before scaling out", **numbers))


# a data-parallel gradient against one process's on the global batch: fp32 sums of ~200 terms
# (world x batch x 6 positions per element) in another order differ by a few x 200 x eps32 ~ 1e-5
# relative; 1e-4 leaves a factor 4 over that and is far below any wrong reduction (N x, 1/N)
NORM_RTOL = 1e-4


def _gradient_norm(batch: int, max_norm: float, lr: float = 0.0, steps: int = 0, summed: bool = False):
    """The global gradient norm after one data-parallel backward (gradients all-reduced), after
    `steps` SGD steps at `lr` first (a large lr makes it blow up), set against one process's
    norm on the global batch from the same weights. `summed`: the all-reduced sum left
    undivided (the wrong reduction the comparison must catch)."""
    from labkit.ddp.data_parallel import FlatDDP
    from labkit.ddp.lr_scaling import _task
    from labkit.toy_models import AwkwardNet, lm_loss
    torch.manual_seed(0)
    ddp = FlatDDP(AwkwardNet())
    n, r = dist.get_world_size(), dist.get_rank()
    x, y = _task(batch * n, seed=12)
    mine = slice(r * batch, (r + 1) * batch)
    opt = torch.optim.SGD([p for p in ddp.module.parameters() if p.requires_grad], lr=lr) if steps else None
    for _ in range(steps):
        lm_loss(ddp(x[mine]), y[mine]).backward()
        ddp.sync_gradients()
        opt.step()
        opt.zero_grad(set_to_none=True)
    one = AwkwardNet()
    one.load_state_dict(ddp.module.state_dict())
    lm_loss(one(x), y).backward()                     # one process, the global batch
    lm_loss(ddp(x[mine]), y[mine]).backward()
    ddp.sync_gradients()
    if summed:
        for p in ddp.module.parameters():
            if p.grad is not None:
                p.grad.mul_(n)

    def total(model):
        return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()
                                                     if p.grad is not None])).item()
    norm, ref = total(ddp.module), total(one)
    if not (math.isfinite(norm) and norm < max_norm):
        return False, tr("global gradient norm {norm:.3g} (above {max_norm:g} or not finite: clip it, lower "
                         "the learning rate, check the loss scale)", norm=norm, max_norm=max_norm)
    if not abs(norm - ref) <= NORM_RTOL * ref:
        return False, tr("global gradient norm {norm:.3g}, one process's on the global batch {ref:.3g} "
                         "({ratio:.3g}x): the all-reduced gradient is not the global batch's mean (summed "
                         "instead of averaged, or averaged twice?)", norm=norm, ref=ref, ratio=norm / ref)
    return True, tr("global gradient norm {norm:.3g}, one process's on the global batch {ref:.3g} (within "
                    "{rtol:g})", norm=norm, ref=ref, rtol=NORM_RTOL)


def convergence_checklist(lr: float, base_lr: float, base_batch: int, batch: int,
                          weights_seed_by_rank: bool = False, max_norm: float = 100.0) -> list:
    """On every rank: the four items of the checklist, [(item, ok, detail)].
    lr: the learning rate used with `batch` per rank; base_lr: the one tuned at base_batch."""
    from labkit.comm.objects import all_gather_json
    from labkit.pitfalls.ranks import seed_probe
    out = [(tr(ITEMS[0]), *_single_rank_sanity())]
    out.append((tr(ITEMS[1]), *_gradient_norm(batch, max_norm)))
    out.append((tr(ITEMS[2]), *pitfalls.lr_rule(lr, base_lr, base_batch, batch * dist.get_world_size())))
    mine = seed_probe(weights_seed_by_rank=weights_seed_by_rank)
    every = all_gather_json(mine)                 # tensors, not pickles: comm/objects.py
    out.append((tr(ITEMS[3]), *pitfalls.seeds_ok([e["weights"] for e in every],
                                             [e["sampler_seed"] for e in every],
                                             [e["dropout"] for e in every])))
    return out
