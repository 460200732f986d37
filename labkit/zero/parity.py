"""One process on the global batch, and ZeRO against it (layer 5 glue, runs inside a rank).

The claim: N ranks, each on 1/N of the global batch, take the same steps as one process on
all of it. Each rank trains the one-process reference itself, from the same initial weights.

Mixed precision: the reference keeps the same fp32 masters (bfloat16 model, bfloat16
gradients, fp32 master and moments, the master rounded back into the model after each step).
It cannot match to fp32 precision: the ranks sum N bfloat16 gradients in another order than
one process computes one, and each bfloat16 rounding is relative 2^-8. See `mixed_bounds`.
"""
import torch
import torch.distributed as dist

from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss

# fp32 is judged in two derived ways (labkit.numerics), never by one figure a CPU printed:
# - Adam (and AdamW) after its first step only, element by element (`parity(...)["over_bound"]`,
#   numerics.one_step_over_bound: <= 1 passes): one step from fresh state is about lr whatever
#   |g|, so an element whose gradient is within rounding of zero may step either way; its bound
#   allows that, the others' do not. AdamW's decay p (1 - lr wd) is the same rounding of the same
#   p in both runs at step 1. Later Adam steps have no such bound: after a flip the next
#   gradients differ by the curvature times 2 lr, and every element may follow; so no Adam run
#   is judged after step 1 (the former fixed 1e-5 for steps 2-3 was not derived and is gone).
# - several steps (optimizer state carried from step to step) with SGD and momentum, linear in
#   the gradient: `sgd_momentum_bound`.


def sgd_momentum_bound(n: int, micro_batches: int, batch: int, steps: int, lr: float,
                       momentum: float) -> float:
    """fp32 SGD with momentum on AwkwardNet against one process (numerics.sgd_bound): each
    gradient a sum over n x micro_batches x batch rows of 6 tokens, added in another order (the
    ranks' sums, then the reduce-scatter), with the terms' size G = 4 (AwkwardNet's gradients
    stay below 1.3) and |p| <= 10 (below 4.2 at the start, moved at most steps lr G / (1 -
    momentum))."""
    from labkit.numerics import reorder_bound, sgd_bound
    tokens = n * micro_batches * batch * 6
    return sgd_bound(reorder_bound(tokens + 2, 4.0), lr, steps, 10.0, momentum=momentum,
                     grad_scale=4.0)

# Mixed precision is judged with plain SGD, whose update -lr*g is linear in the gradient: a
# gradient off by a relative e moves the master off by e times the distance the reference
# moved. A few bfloat16 roundings (2^-8 = 0.004 each) give e of about 0.01 (measured 0.004 to
# 0.010 on AwkwardNet); the bound allows 0.05. A rank that never updates, or never writes its
# masters back into the model, is exactly as far from the reference as the reference moved
# (ratio 1), so it fails. (Adam would not do: its step is about lr whatever the gradient, and a
# bound loose enough for a flipped sign, 2 lr per step, also passes an optimizer that does nothing.)
MIXED_OPTIMIZER, MIXED_LR = torch.optim.SGD, 0.5
MIXED_FRACTION = 0.05
BF16_ROUNDING = 2 ** -6      # one bfloat16 step (ulp) for weights in [2, 4): AwkwardNet's are below 4


def mixed_failures(result: dict) -> list:
    """The steps of one mixed-precision `parity` result that miss the bounds: the masters must be
    within MIXED_FRACTION of how far the reference moved in that step's total, the bfloat16
    parameters within that plus one bfloat16 rounding. [] when every step passes."""
    bad = []
    for i, (p, m, mp, mm) in enumerate(zip(result["params"], result["masters"],
                                           result["moved_params"], result["moved_masters"])):
        if m > MIXED_FRACTION * mm:
            bad.append(f"step {i + 1}: masters off by {m:.3g} > {MIXED_FRACTION} x {mm:.3g} moved")
        if p > MIXED_FRACTION * mp + BF16_ROUNDING:
            bad.append(f"step {i + 1}: parameters off by {p:.3g} > {MIXED_FRACTION} x {mp:.3g} "
                       f"moved + {BF16_ROUNDING:g}")
    return bad


class OneProcess:
    """`optimizer_class` on one process, optionally with bfloat16 model and fp32 masters."""

    def __init__(self, model, optimizer_class, mixed_precision=False, **kwargs):
        self.model, self.mixed = model, mixed_precision
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        if mixed_precision:
            self.masters = [torch.nn.Parameter(p.detach().float().clone()) for p in self.params]
            with torch.no_grad():
                for p in model.parameters():
                    if p.is_floating_point():
                        p.data = p.data.to(torch.bfloat16)
        self.opt = optimizer_class(self.masters if mixed_precision else self.params, **kwargs)

    @torch.no_grad()
    def step(self):
        missing = [n for n, p in zip(self.names, self.params) if p.grad is None]
        if missing:
            raise RuntimeError(f"one process: parameter(s) {missing} require a gradient but got none "
                               "in backward: unused in forward? Freeze them (requires_grad_(False)) "
                               "or use them, on the ranks and in the reference alike")
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
    init_p = {n: t.detach().float().clone() for n, t in ref.model.named_parameters()}
    init_m = {n: t.clone() for n, t in ref.master_values().items()}
    out = {"params": [], "masters": [], "where": [], "moved_params": [], "moved_masters": [],
           "over_bound": None}
    for step in range(steps):
        x, y = awkward_batch(n * micro_batches * batch, seed=1000 + step)
        lm_loss(ref.model(x).float(), y).backward()
        grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().clone()
                 for k, p in ref.model.named_parameters()}
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
        if step == 0 and not mixed and optimizer in (torch.optim.Adam, torch.optim.AdamW):
            from labkit.numerics import one_step_over_bound
            got = {(k[len("module."):] if k.startswith("module.") else k): t.float()
                   for k, t in full.items()}
            out["over_bound"] = one_step_over_bound(
                got, {k: want[k].detach().float() for k in got}, grads, y.numel(), lr, "adam")
        out["masters"].append(mw)
        out["where"].append(where)
        # how far the reference itself moved from the start: a rank that never updates (or
        # never writes its masters back) is exactly this far from the reference
        out["moved_params"].append(max((p.detach().float() - init_p[k]).abs().max().item()
                                       for k, p in ref.model.named_parameters()))
        out["moved_masters"].append(max((m - init_m[k]).abs().max().item()
                                        for k, m in ref_m.items()))
    return out
