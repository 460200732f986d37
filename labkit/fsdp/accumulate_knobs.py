"""FSDP2's two knobs for gradient accumulation, counted per micro-batch (layer 3).

    rows = cluster.run(knob_run, knob="no sync, keep unsharded")[0]["rows"]
    expected_counts(blocks=2, micro=4, knob=...)          # the same counts from the rules below

On the first micro-1 micro-batches of a step (the last one always syncs and reshards):
- "sync every micro-batch": the default. Each backward reduce-scatters every unit's gradient.
- "no sync": `model.set_requires_gradient_sync(False)`. No reduce-scatter; each rank keeps a
  full-size, unreduced gradient of every parameter until the last micro-batch reduces it once.
  Costs: the unsharded gradients (the whole model's size) held between micro-batches.
- "no sync, keep unsharded": also `model.set_reshard_after_backward(False)`: parameters stay
  all-gathered after backward, so the next forward gathers nothing. The blocks still reshard
  after forward (reshard_after_forward=True) and gather again in backward. Costs: the full
  parameters held between micro-batches too.
FSDP2's rules counted here: a unit all-gathers in forward when it is sharded, in backward when
it was resharded after forward (the blocks, not the root); it reduce-scatters in backward when
gradient sync is on.
"""
import copy

import torch
import torch.distributed as dist

from labkit.i18n import N_

KNOBS = (N_("sync every micro-batch"), N_("no sync"), N_("no sync, keep unsharded"))   # N_: shown translated


def expected_counts(blocks: int, micro: int, knob: str) -> list:
    """Per micro-batch {'all_gather', 'reduce_scatter'} for `blocks` block units + the root."""
    if knob not in KNOBS:
        raise ValueError(f"knob must be one of {KNOBS}, got {knob!r}")
    units, rows = blocks + 1, []
    for i in range(micro):
        last = i == micro - 1
        gathered_before = knob == KNOBS[2] and i > 0      # kept unsharded by the last backward
        ag = (0 if gathered_before else units) + blocks    # forward + blocks again in backward
        rs = units if (last or knob == KNOBS[0]) else 0
        rows.append({"all_gather": ag, "reduce_scatter": rs})
    return rows


def knob_run(knob: str = "no sync", micro: int = 4, per_micro: int = 2, lr: float = 0.1) -> dict:
    """One accumulated SGD step of a 2-block TinyGPT under FSDP2 with `knob`; per micro-batch:
    all-gathers and reduce-scatters (FSDP's own calls, logged), bytes of full parameters and of
    unsharded gradients still held after its backward, and the largest parameter difference
    from one process on the whole batch."""
    from labkit.fsdp import apply
    from labkit.fsdp.accumulate import unsharded_grad_bytes
    from labkit.fsdp.demo import gathered_bytes
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import lm_loss
    if knob not in KNOBS:
        raise ValueError(f"knob must be one of {KNOBS}, got {knob!r}")
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = tiny_gpt()
    model = copy.deepcopy(ref)
    apply.shard(model, wrap="block", strategy="full")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    X, Y = batch(n, micro * per_micro)
    x, y = (t[micro * per_micro * r: micro * per_micro * (r + 1)] for t in (X, Y))
    apply.comm_log(model, clear=True)
    rows = []
    for i in range(micro):
        last = i == micro - 1
        model.set_requires_gradient_sync(last or knob == KNOBS[0])
        model.set_reshard_after_backward(last or knob != KNOBS[2])
        s = slice(i * per_micro, (i + 1) * per_micro)
        (lm_loss(model(x[s]), y[s]) / micro).backward()
        c = apply.counts(apply.comm_log(model, clear=True))
        rows.append({"micro": i, **c, "full params held": gathered_bytes(model),
                     "unsharded grads held": unsharded_grad_bytes(model)})
    opt.step()
    lm_loss(ref(X), Y).backward()
    grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach()
             for k, p in ref.state_dict(keep_vars=True).items()}
    torch.optim.SGD(ref.parameters(), lr=lr).step()
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    err = max((full[k] - v).abs().max().item() for k, v in ref.state_dict().items())
    model_bytes = sum(p.numel() * 4 for p in {id(p): p for p in ref.parameters()}.values())
    padded = sum(g.param_bytes for g in apply.groups(ref, "block", "full", n))
    from labkit.numerics import one_step_over_bound      # derived: fp32 sums over X's tokens, one SGD step
    over = one_step_over_bound(full, ref.state_dict(), grads, X.numel(), lr, "sgd")
    return {"knob": knob, "rows": rows, "max_err": err, "err_over_bound": over, "model_bytes": model_bytes,
            "padded model bytes": padded,      # FSDP2's all-gather outputs: dim 0 padded to n
            "blocks": len(ref.blocks)}
