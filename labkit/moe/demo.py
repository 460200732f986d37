"""Run on every rank: the steps of one expert-parallel forward, and a short training run that
reports the load of every expert at every step (for the live picture in notebook 13).

    cluster.run(dispatch_steps)                 # split sizes and rows, per rank
    with LiveLoad(cluster) as fig:              # labkit.moe.plots
        cluster.run(train_load, aux_loss_weight=1.0)
"""
import time

import torch
import torch.distributed as dist

import labkit
from labkit.moe.parity import build, skewed
from labkit.moe.parallel import expert_parallel, reduce_gradients


def dispatch_steps(tokens=8, hidden=16, experts=8, k=1, seed=3) -> dict:
    """Route `tokens` tokens of this rank and return what each step of the exchange sees."""
    n, r = dist.get_world_size(), dist.get_rank()
    moe = expert_parallel(build(hidden, 32, experts, k))
    g = torch.Generator().manual_seed(seed + r)
    moe(torch.randn(tokens, hidden, generator=g).to(labkit.device()))
    per_expert = moe.tokens_per_expert
    return {"expert": moe.routing["expert"][:, 0].tolist(), "per expert": per_expert.tolist(),
            "send splits": per_expert.view(n, -1).sum(1).tolist(),
            "received per local expert": moe.received.tolist(),
            "recv splits": moe.received.sum(1).tolist(), "first expert": moe.first_expert}


def train_load(steps=30, aux_loss_weight=0.0, capacity_factor=None, tokens=64, hidden=16,
               experts=8, k=2, lr=0.1, skew=3.0, emit=True, bias_update=0.0) -> list:
    """Train an expert-parallel MoE to fit a fixed random function of skewed tokens (most go
    to experts 0 and 1 at first). Each step: tokens computed by every expert (all ranks'),
    assignments dropped over capacity, seconds of this rank's expert compute. Emitted live.
    bias_update > 0: DeepSeek-V3's bias balancing (`MoE.balance_with_bias`), updated each step
    from every rank's load."""
    n, r = dist.get_world_size(), dist.get_rank()
    moe = expert_parallel(skewed(build(hidden, 32, experts, k, capacity_factor), skew, 2))
    moe.aux_loss_weight = aux_loss_weight
    if bias_update:
        moe.balance_with_bias(bias_update)
    opt = torch.optim.SGD(moe.parameters(), lr=lr)
    teacher = torch.randn(hidden, hidden, generator=torch.Generator().manual_seed(5)).to(labkit.device()) / 4
    run_local, spent = moe.experts_forward, [0.0]

    def timed(xs, expert):                      # the rank's experts, timed with their exchange
        t0 = time.perf_counter()
        out = run_local(xs, expert)
        spent[0] += time.perf_counter() - t0
        return out
    moe.experts_forward = timed
    history = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + r)
        x = torch.randn(tokens, hidden, generator=g).to(labkit.device()) + 1.0
        spent[0] = 0.0
        y = moe(x)
        loss = ((y - torch.tanh(x @ teacher)) ** 2).mean() + moe.aux_loss
        opt.zero_grad()
        loss.backward()
        reduce_gradients(moe)
        opt.step()
        load = torch.zeros(experts, dtype=torch.long, device=x.device)
        load[moe.first_expert:moe.first_expert + len(moe.experts)] = moe.received.sum(0)
        stats = torch.cat([load, torch.tensor([moe.dropped], device=x.device)])
        dist.all_reduce(stats)
        if bias_update:
            moe.update_bias(stats[:-1])
        row = {"step": step, "load": stats[:-1].tolist(), "dropped": int(stats[-1]),
               "loss": loss.item(), "seconds": spent[0]}
        history.append(row)
        if emit:
            labkit.emit(**row)
    return history


def step_times(skew=0.0, tokens=512, hidden=128, ffn_hidden=1024, experts=8, k=2, repeats=5) -> dict:
    """One forward of an expert-parallel layer, timed (median of `repeats`): the whole forward,
    and this rank's expert compute alone (forward hooks on its experts), with the rows it got."""
    n, r = dist.get_world_size(), dist.get_rank()
    moe = expert_parallel(skewed(build(hidden, ffn_hidden, experts, k), skew, experts // n))
    spent = [0.0]
    for e in moe.experts:
        e.register_forward_pre_hook(lambda m, a: m.__dict__.__setitem__("_t0", time.perf_counter()))
        e.register_forward_hook(lambda m, a, o: spent.__setitem__(0, spent[0] + time.perf_counter() - m._t0))
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(r)).to(labkit.device()) + (1.0 if skew else 0.0)
    fwd, comp = [], []
    with torch.no_grad():
        for _ in range(repeats + 1):
            dist.barrier()
            spent[0] = 0.0
            t0 = time.perf_counter()
            moe(x)
            fwd.append(time.perf_counter() - t0)
            comp.append(spent[0])
    med = lambda v: sorted(v[1:])[len(v[1:]) // 2]
    return {"rows": int(moe.received.sum()), "expert seconds": med(comp), "forward seconds": med(fwd)}
