"""ZeRO-3 mixed precision in both layouts, measured inside a rank (layer 3).

    row = cluster.run(policy_report, torch.bfloat16, "sharded")[0]

`policy_report` trains TinyGPT with labkit.zero.wrap(stage=3, policy=Policy(...)) and returns
what one rank holds (to the byte, beside the formula and its named extras), the bytes it sent and
the dtype of every collective, and the parameters after the steps beside one process that keeps
fp32 weights and fp32 gradients and casts every parameter to the compute dtype for forward and
backward (`reference_step`), on the global batch.
"""
import torch
import torch.distributed as dist

from labkit.comm import traffic
from labkit.memory import measure
from labkit.toy_models import lm_loss
from labkit.zero.policy import Policy
from labkit.zero.runs import tiny_gpt

SHAPE = dict(n_layer=2, n_embd=64, vocab=256, seq=16)


def reference_step(model, batches, dtype, lr: float) -> None:
    """One SGD step of one process on every rank's batch (mean of the ranks' losses), with each
    parameter cast to `dtype` for forward and backward: the fp32 weights get fp32 gradients."""
    from torch.func import functional_call
    params = dict(model.named_parameters())
    model.zero_grad()
    for x, y in batches:
        cast = {n: p.to(dtype) for n, p in params.items()}
        (lm_loss(functional_call(model, cast, (x,)).float(), y) / len(batches)).backward()
    with torch.no_grad():
        for p in params.values():
            p -= lr * p.grad


def _log_collectives(log):
    """Patch labkit.zero.flat's all-gather and reduce-scatter to log (name, dtype, elements)."""
    from labkit.zero import flat as F
    ag, rs = F.all_gather, F.reduce_scatter

    def all_gather(flat, shard, group=None, async_op=False):
        log.append(("all-gather", str(flat.dtype).replace("torch.", ""), flat.numel()))
        return ag(flat, shard, group, async_op)

    def reduce_scatter(flat, group=None):
        log.append(("reduce-scatter", str(flat.dtype).replace("torch.", ""), flat.numel()))
        return rs(flat, group)
    F.all_gather, F.reduce_scatter = all_gather, reduce_scatter
    return lambda: (setattr(F, "all_gather", ag), setattr(F, "reduce_scatter", rs))


def policy_report(param_dtype=torch.bfloat16, layout: str = "sharded", reduce_dtype=None,
                  steps: int = 2, lr: float = 0.1, optimizer: str = "sgd", batch: int = 2) -> dict:
    """Train `steps` steps of TinyGPT with ZeRO-3 under Policy(param_dtype, reduce_dtype, layout);
    measure the last step. Returns held bytes (`memory`), the formula with its extras
    (`expected`), bytes sent against `expected_sent`, the collectives of the last step
    ({(name, dtype): count}), and the largest difference of the full parameters from
    `reference_step`'s (`max_diff`) with the largest parameter (`max_param`)."""
    from labkit.zero import wrap
    from labkit.zero.accounting import expected_memory, expected_traffic
    policy = Policy(param_dtype, reduce_dtype, layout)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net, batch_fn = tiny_gpt(**SHAPE)
    torch.manual_seed(0)
    ref, _ = tiny_gpt(**SHAPE)
    cls, kw = (torch.optim.SGD, dict(lr=lr)) if optimizer == "sgd" else (torch.optim.Adam, dict(lr=lr))
    model, opt = wrap(net, cls, stage=3, policy=policy, **kw)
    log = []
    for step in range(steps):
        batches = [batch_fn(batch, 100 * step + 10 * r) for r in range(world)]
        last = step == steps - 1
        if last:
            undo = _log_collectives(log)
            dist.barrier()
            ctx = traffic.measure(sync=True)
            m = ctx.__enter__()
        x, y = batches[rank]
        lm_loss(model(x).float(), y).backward()
        opt.step()
        if last:
            ctx.__exit__(None, None, None)
            undo()
            held = measure(model, opt)
        opt.zero_grad()
        if optimizer == "sgd":
            reference_step(ref, batches, param_dtype, lr)
    full = model.full_parameters()
    mine = dict(ref.named_parameters())
    diff = max(float((full[n].float() - mine[n].detach()).abs().max()) for n in full)
    collectives = {}
    for name, dtype, _ in log:
        collectives[(name, dtype)] = collectives.get((name, dtype), 0) + 1
    exp = expected_memory(opt)
    sent = expected_traffic(opt)
    return dict(rank=rank, layout=layout, param_dtype=str(param_dtype).replace("torch.", ""),
                shard_dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
                memory=held, expected=exp, sent=m.sent, expected_sent=sum(sent.values()), by_collective=sent,
                collectives=collectives, max_diff=diff if optimizer == "sgd" else None,
                max_param=max(float(p.detach().abs().max()) for p in mine.values()))


def tolerance(row: dict, reduce_dtype=None) -> float:
    """How far `policy_report`'s parameters may be from one process's after its 2 SGD steps (lr
    0.1, parameters about 1). 16-bit shards are rounded to 16 bits after each step: half a unit in
    the last place of the largest parameter. fp32 shards: each rank's backward hands out its
    gradient rounded to 16 bits where one process rounds the global batch's gradient once, and a
    16-bit reduction rounds the sum again: a few units of 2^-8 relative (bf16) on gradients below
    about 0.2, times lr, twice: under 2e-4. `reduce_dtype` is accepted for symmetry; it only
    makes the difference smaller."""
    if row["layout"] == "masters":
        half_ulp = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}[row["param_dtype"]]
        return half_ulp * row["max_param"] * 1.01
    return 2e-4


@torch.no_grad()
def full_grads(model) -> dict:
    """{name: full gradient} of a Stage3 model, gathered from the shards' gradients (a collective)."""
    from labkit.zero import flat as F
    out = {}
    for g in model.groups():
        if not g.trainable or g.shard.grad is None:
            continue
        full = g.shard.grad.new_empty(g.layout.size)
        F.all_gather(full, g.shard.grad, model.group)
        out.update({n: v.clone() for n, v in g.layout.views(full).items()})
    return out
