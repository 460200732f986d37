"""Learning rate and global batch: the linear and square-root scaling rules.

The notes' convergence checklist: "学习率缩放了吗？（linear / sqrt 两种规则）". With N ranks of
batch b the global batch is B = N b; an optimizer step averages B samples' gradients, so one
epoch takes N times fewer steps. To move as far per sample seen, scale the learning rate:
- linear: lr = lr0 * B / B0 (Goyal et al. 2017, "Accurate, Large Minibatch SGD", sec. 2.1)
- sqrt:   lr = lr0 * sqrt(B / B0) (Krizhevsky 2014; Hoffer et al. 2017: keeps the gradient
  noise's variance per sample constant; the usual choice for Adam)
`scaled_lr` is pure maths; `lr_rule_run` trains on the ranks to show the difference.
"""
import math

RULES = ("none", "sqrt", "linear")


def scaled_lr(base_lr: float, base_batch: int, global_batch: int, rule: str = "linear") -> float:
    """The learning rate for `global_batch` given one tuned at `base_batch`."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    k = global_batch / base_batch
    return base_lr * {"none": 1.0, "sqrt": math.sqrt(k), "linear": k}[rule]


def _task(n: int, seed: int, vocab: int = 37, seq: int = 6, device=None):
    """A learnable toy task for AwkwardNet: predict (3 * token + 1) mod vocab at each position.
    Drawn on the CPU (the same numbers on every device), then moved to `device`."""
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, seq), generator=g).to(device)
    return x, (3 * x + 1) % vocab


def lr_rule_run(rule: str, base_lr: float = 0.05, batch: int = 4, samples: int = 1024,
                lr: float = None) -> dict:
    """On every rank: train AwkwardNet with BucketedDDP on `samples` samples (each rank `batch`
    per step, global batch N*batch, so samples / (N*batch) steps) with the learning rate given
    by `rule` from (base_lr at base batch `batch`), or `lr` when given (to try one that is
    scaled too far). Also trains one process at the base batch on the same samples (on rank 0
    only). Returns (samples seen, loss) lists for both."""
    import torch
    import torch.distributed as dist
    from labkit.ddp.data_parallel import BucketedDDP
    from labkit.toy_models import AwkwardNet, lm_loss
    import labkit
    rank, n, dev = dist.get_rank(), dist.get_world_size(), labkit.device()
    x, y = _task(samples, seed=3, device=dev)
    lr = scaled_lr(base_lr, batch, n * batch, rule) if lr is None else lr

    def fresh():
        torch.manual_seed(0)
        return AwkwardNet().to(dev)
    model, base = fresh(), fresh()
    ddp = BucketedDDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    base_opt = torch.optim.SGD(base.parameters(), lr=base_lr)
    out = {"rule": rule, "lr": lr, "ddp": [], "base": []}
    for start in range(0, samples, n * batch):                 # one DDP step per global batch
        mine = slice(start + rank * batch, start + (rank + 1) * batch)
        loss = lm_loss(ddp(x[mine]), y[mine])
        loss.backward()
        ddp.sync_gradients()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        out["ddp"].append((start + n * batch, mean.item() / n))
        for k in range(n if rank == 0 else 0):                 # base: N steps of `batch`
            s = slice(start + k * batch, start + (k + 1) * batch)
            base_loss = lm_loss(base(x[s]), y[s])
            base_loss.backward()
            base_opt.step()
            base_opt.zero_grad(set_to_none=True)
            out["base"].append((start + (k + 1) * batch, base_loss.item()))
    return out
