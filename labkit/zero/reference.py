"""One process on the global batch, and ZeRO against it (layer 5 glue, runs inside a rank).

The claim: N ranks, each on 1/N of the global batch, take the same steps as one process on
all of it. Each rank trains the one-process reference itself, from the same initial weights.

Mixed precision: the reference keeps the same fp32 masters (bfloat16 model, bfloat16
gradients, fp32 master and moments, the master rounded back into the model after each step).
It cannot match to fp32 precision: the ranks sum N bfloat16 gradients in another order than
one process computes one, and each bfloat16 rounding is relative 2^-8. See `MIXED_TOLERANCE`.
"""
import torch
import torch.distributed as dist

from labkit.models import AwkwardNet, awkward_batch, lm_loss

FP32_TOLERANCE = 1e-5
# Adam's update per step is at most about lr in size whatever the gradient (m / sqrt(v) is
# bounded near 1); a gradient entry near zero whose bfloat16 rounding differs can flip its
# sign, moving the master by up to 2 lr in the other direction. So after `steps` steps the
# masters may differ by 2 lr x steps in the worst entry, and the bfloat16 parameters by that
# plus one rounding (relative 2^-8 of a weight of size ~1).
def mixed_tolerance(lr: float, steps: int) -> float:
    return 2 * lr * steps


class OneProcess:
    """`optimizer_class` on one process, optionally with bfloat16 model and fp32 masters."""

    def __init__(self, model, optimizer_class, mixed_precision=False, **kwargs):
        self.model, self.mixed = model, mixed_precision
        self.params = [p for p in model.parameters() if p.requires_grad]
        if mixed_precision:
            self.masters = [torch.nn.Parameter(p.detach().float().clone()) for p in self.params]
            with torch.no_grad():
                for p in model.parameters():
                    if p.is_floating_point():
                        p.data = p.data.to(torch.bfloat16)
        self.opt = optimizer_class(self.masters if mixed_precision else self.params, **kwargs)

    @torch.no_grad()
    def step(self):
        if self.mixed:
            for m, p in zip(self.masters, self.params):
                m.grad = p.grad.float()
        self.opt.step()
        if self.mixed:
            for m, p in zip(self.masters, self.params):
                p.copy_(m)
        for p in self.params:
            p.grad = None

    def master_values(self) -> dict:
        """{name: fp32 master} (fp32 run: the parameters)."""
        src = self.masters if self.mixed else self.params
        names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        return {n: m.detach() for n, m in zip(names, src)}


def full_params(model) -> dict:
    """{name: full parameter} of a wrapped model (stage 3 gathers: every rank must call it)."""
    if hasattr(model, "full_parameters"):
        return model.full_parameters()
    return {n: p.detach() for n, p in model.named_parameters()}


def own_masters(opt) -> list:
    """[(layout, fp32 tensor this rank updates)] for a ZeroOptimizer or MasterOptimizer."""
    if hasattr(opt, "buckets"):
        return [(b.layout, b.work.detach(), b.lo, b.hi) for b in opt.buckets]
    groups = [g for g in opt.model.groups() if g.trainable]
    return [(g.layout, w.detach(), g.layout.lo, g.layout.hi) for g, w in zip(groups, opt.work)]


def parity(stage: int, mixed: bool = False, steps: int = 3, micro_batches: int = 1,
           batch: int = 2, lr: float = 1e-2, optimizer=torch.optim.Adam, seed: int = 0,
           group=None, **options) -> dict:
    """Train AwkwardNet with `wrap(stage=...)` and the one-process reference side by side.

    Returns {"params": max |full parameter - reference| after each step, "masters": max |own
    fp32 master - reference master| after each step, "where": worst parameter name}."""
    from labkit.zero import wrap
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    torch.manual_seed(seed + rank)                       # unequal start: wrap broadcasts rank 0's
    model = AwkwardNet()
    torch.manual_seed(seed)
    opt_kwargs = {k: v for k, v in options.items() if k not in ("prefetch", "bucket_mb", "reduce_dtype")}
    ref = OneProcess(AwkwardNet(), optimizer, mixed, lr=lr, **opt_kwargs)
    wrapped, opt = wrap(model, optimizer, stage=stage, mixed_precision=mixed, lr=lr, group=group,
                       **options)
    out = {"params": [], "masters": [], "where": []}
    for step in range(steps):
        x, y = awkward_batch(n * micro_batches * batch, seed=1000 + step)
        lm_loss(ref.model(x).float(), y).backward()
        ref.step()
        mine = slice(rank * micro_batches * batch, (rank + 1) * micro_batches * batch)
        for xs, ys in zip(x[mine].split(batch), y[mine].split(batch)):
            (lm_loss(wrapped(xs).float(), ys) / micro_batches).backward()
        opt.step()
        opt.zero_grad()
        full, want = full_params(wrapped), dict(ref.model.named_parameters())
        worst, where = 0.0, None
        for name, t in full.items():
            key = name[len("module."):] if name.startswith("module.") else name
            d = (t.float() - want[key].detach().float()).abs().max().item()
            if where is None or d > worst:
                worst, where = d, key
        ref_m = ref.master_values()
        mw = 0.0
        for layout, work, lo, hi in own_masters(opt):
            flat = layout.flatten({k: ref_m[k] for k, *_ in layout.entries}, dtype=torch.float32)
            mw = max(mw, (work.float() - flat[lo:hi]).abs().max().item())
        out["params"].append(worst)
        out["masters"].append(mw)
        out["where"].append(where)
    return out
