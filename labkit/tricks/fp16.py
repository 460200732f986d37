"""fp16 training, measured: gradients that underflow to 0, loss scaling, the ranks agreeing (layer 3).

    underflow(scaler=None)              # one process: loss and underflowed gradient elements per step
    beside_gradscaler()                 # labkit's LossScaler and torch.amp.GradScaler on one run
    inside a rank: agree_on_skip(kind)  # one rank finds an inf in its shard: every rank skips

The model is a small MLP (16 -> 32 -> 1, tanh) on small inputs whose output layer is fixed at
small weights, as gradients become late in training: the first layer's gradients are around
1e-9, below half of fp16's smallest subnormal (2^-25, 3e-8; round to nearest even sends a value
between 2^-25 and 2^-24 up to 2^-24, one at most 2^-25 to 0), so in fp16 they underflow to exactly
0 and Adam does not move those weights. fp32 masters are kept (labkit.zero.masters.MasterOptimizer): the fp16
weights are rounded copies, rewritten after each update.
"""
import torch

import labkit
import torch.distributed as dist

from labkit.tricks.loss_scale import LossScaler

D, H, BATCH = 16, 32, 256
X_SCALE = 1e-2                     # small inputs ...
OUT_SCALE = 1e-2                   # ... and a small fixed output layer: tiny first-layer gradients
LR = 2e-3                          # Adam: any nonzero gradient moves its weight; a zero one does not


def problem(seed: int = 0, batch: int = BATCH):
    """(x, y, student): the student's output layer is fixed (small weights, not trained); the
    targets are what its hidden layer would give with other first-layer weights (a teacher's)."""
    g = torch.Generator().manual_seed(seed)
    dev = labkit.device()                          # a rank's GPU under NCCL, else the CPU
    student, teacher = _mlp(seed, OUT_SCALE).to(dev), _mlp(seed + 100, OUT_SCALE).to(dev)
    teacher[2].load_state_dict(student[2].state_dict())
    student[2].requires_grad_(False)
    x = torch.randn(batch, D, generator=g).to(labkit.device()) * X_SCALE
    with torch.no_grad():
        y = teacher(x)
    return x, y, student


def _mlp(seed: int, out_scale: float = 1.0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.Tanh(), torch.nn.Linear(H, 1))
    with torch.no_grad():
        m[2].weight.mul_(out_scale)
        m[2].bias.mul_(out_scale)
    return m


def _loss(model, x, y):
    out = model(x.to(next(model.parameters()).dtype)).float()
    return ((out - y) ** 2).mean()


def underflow(scaler: LossScaler = None, steps: int = 20, fp16: bool = True, seed: int = 0) -> dict:
    """Train `steps` Adam steps in fp16 with fp32 masters (or in fp32), with `scaler` or none.
    Each step also takes the fp32 gradient at the same weights, to count the elements nonzero
    there and exactly 0 in fp16 ('underflowed'). {'loss', 'underflowed', 'skipped', 'scale': per step,
    'n': trainable elements, 'smallest': smallest nonzero fp32 |gradient| at step 0, 'grads0':
    the fp32 gradients at step 0, flat}."""
    from labkit.zero.masters import MasterOptimizer
    x, y, model = problem(seed)
    ref = problem(seed)[2]
    trainable = [p for p in ref.parameters() if p.requires_grad]
    if fp16:
        model.half()
    opt = MasterOptimizer(model.parameters(), torch.optim.Adam, mixed_precision=fp16, lr=LR)
    out = dict(loss=[], underflowed=[], skipped=[], scale=[], n=sum(p.numel() for p in trainable))
    for step in range(steps):
        with torch.no_grad():
            for r, w in zip(trainable, opt.work):
                r.copy_(w)
        ref.zero_grad()
        _loss(ref, x, y).backward()
        if step == 0:
            out["smallest"] = min(float(r.grad.abs()[r.grad != 0].min()) for r in trainable)
            out["grads0"] = torch.cat([r.grad.reshape(-1) for r in trainable]).clone()
        model.zero_grad()
        loss = _loss(model, x, y)
        out["loss"].append(loss.item())
        out["scale"].append(scaler.scale_value if scaler is not None else 1.0)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        out["underflowed"].append(sum(int(((r.grad != 0) & (p.grad == 0)).sum())
                                  for r, p in zip(trainable, opt.params)))
        if scaler is None:
            opt.step()
            out["skipped"].append(False)
        else:
            out["skipped"].append(not scaler.step(opt))
            scaler.update()
    return out


def beside_gradscaler(steps: int = 12, init_scale: float = 2.0 ** 40, growth_interval: int = 2,
                      seed: int = 0) -> dict:
    """The same run twice under fp16 autocast (fp32 weights, Adam): once with labkit's
    LossScaler, once with torch.amp.GradScaler('cpu'), same settings. The first scale is so large
    that the first steps overflow. {'labkit': {'scale', 'skipped'}, 'torch': {...},
    'max_weight_diff': largest difference of the final weights, 'finite': all weights finite}."""
    out, finals = {}, {}
    for name in ("labkit", "torch"):
        x, y, model = problem(seed)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LR)
        kw = dict(init_scale=init_scale, growth_interval=growth_interval)
        scaler = LossScaler(**kw) if name == "labkit" else torch.amp.GradScaler(x.device.type, **kw)
        scales, skipped = [], []
        for _ in range(steps):
            opt.zero_grad()
            with torch.autocast(x.device.type, dtype=torch.float16):
                loss = ((model(x).float() - y) ** 2).mean()
            before = [p.detach().clone() for p in model.parameters()]
            scales.append(float(scaler.get_scale() if name == "torch" else scaler.scale_value))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            skipped.append(all(torch.equal(b, p) for b, p in zip(before, model.parameters())))
        out[name] = dict(scale=scales, skipped=skipped)
        finals[name] = [p.detach().clone() for p in model.parameters()]
    out["max_weight_diff"] = max(float((a - b).abs().max()) for a, b in zip(finals["labkit"], finals["torch"]))
    out["finite"] = all(bool(torch.isfinite(p).all()) for p in finals["labkit"])
    return out


def agree_on_skip(kind: str = "labkit", steps: int = 8, init_scale: float = 2.0 ** 8, seed: int = 0) -> dict:
    """Inside a rank: the MLP trained data parallel with sharded gradients and weights (ZeRO-2 by
    hand: the gradients are reduce-scattered, each rank keeps and updates its part of the flat
    weights, then all-gathers them), under fp16 autocast with a dynamic loss scaler that doubles S
    after every good step (`kind`: 'labkit', 'labkit-alone' (each rank decides from its own shard:
    wrong), 'sharded' (torch's ShardedGradScaler)). As S grows, the first gradient to overflow is
    the last layer's bias (a sum over the batch of the output's gradient): it lies in the last
    rank's shard, so only that rank finds an inf. Per step: the scale, inf in this rank's shard,
    whether this rank stepped."""
    from labkit.zero import flat as F
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH * world, D, generator=g).to(labkit.device())
    with torch.no_grad():
        y = _mlp(seed + 100).to(x.device)(x)
    x, y = x.chunk(world)[rank], y.chunk(world)[rank]                    # O(1) numbers here
    model = _mlp(seed).to(x.device)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    size = -(-numel // world) * world
    full = torch.zeros(size, device=x.device)
    full[:numel] = torch.nn.utils.parameters_to_vector(params).detach()
    lo, hi = rank * size // world, (rank + 1) * size // world
    shard = torch.nn.Parameter(full[lo:hi].clone())
    opt = torch.optim.SGD([shard], lr=1e-3)
    if kind == "sharded":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        scaler = ShardedGradScaler(device=x.device.type, init_scale=init_scale, growth_interval=1)
    else:
        scaler = LossScaler(init_scale=init_scale, growth_interval=1, agree=(kind == "labkit"))
    rows = []
    for step in range(steps):
        F.all_gather(full, shard.detach())
        torch.nn.utils.vector_to_parameters(full[:numel], params)
        for p in params:
            p.grad = None
        with torch.autocast(x.device.type, dtype=torch.float16):
            loss = ((model(x).float() - y) ** 2).sum()
        scale = float(scaler.get_scale() if kind == "sharded" else scaler.scale_value)
        scaler.scale(loss).backward()
        flat = torch.zeros(size, device=x.device)
        flat[:numel] = torch.cat([p.grad.reshape(-1) for p in params])
        inf_local = not bool(torch.isfinite(flat).all())
        shard.grad = F.reduce_scatter(flat).div(world)
        inf_shard = not bool(torch.isfinite(shard.grad).all())
        before = shard.detach().clone()
        scaler.step(opt)
        scaler.update()
        rows.append(dict(step=step, scale=scale, inf_backward=inf_local, inf_shard=inf_shard,
                         stepped=not torch.equal(before, shard.detach()), loss=float(loss.detach())))
    return dict(rank=rank, kind=kind, rows=rows, shard=(lo, hi), bias_at=numel - 1)
