"""Run on every rank: expert parallelism against the one-device layer, and bytes on the wire.

    cluster.run(ep_parity, k=2, capacity_factor=1.0, tokens=(5, 11))   # max |diff| per name
    cluster.run(ep_dp_parity)           # 4 ranks: EP groups {0,1} {2,3} inside DP {0,2} {1,3}
    cluster.run(ep_traffic, skew=2.0)   # bytes sent per all-to-all, measured and by formula

The reference is one process: the one-device MoE run on each rank's tokens in turn (every rank
draws every rank's tokens from the same seed), loss = sum over ranks of (y_r * w_r).sum() +
aux_loss_r, whose gradients divided by the number of ranks are what `reduce_gradients` gives.
"""
import torch

import labkit
import torch.distributed as dist

from labkit.comm import traffic
from labkit.moe import formulas
from labkit.moe.layer import MoE
from labkit.moe.parallel import expert_parallel, reduce_gradients

def build(hidden=16, ffn_hidden=32, experts=4, k=2, capacity_factor=None, seed=0) -> MoE:
    torch.manual_seed(seed)
    moe = MoE(hidden, ffn_hidden, experts, k=k, capacity_factor=capacity_factor)
    with torch.no_grad():                          # spread the router so choices are not ties
        moe.router.weight.normal_(std=hidden ** -0.5)
    return moe


def rank_tokens(tokens, hidden, seed=1):
    """[(x_r, w_r)] for every rank r: tokens[r] tokens each, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(t, hidden, generator=g).to(labkit.device()), torch.randn(t, hidden, generator=g).to(labkit.device())) for t in tokens]


# Derived, not tuned (labkit.numerics.chain_bound): the reductions along one forward and backward
# of the MoE layer, summed in another order with experts on other ranks (tokens grouped per rank
# and per expert, then the gradients' reduction) than on one device. SCALE bounds every value
# compared: tests/moe/test_moe_parallel.py checks it on one process (7.8 at most over its cases).
SCALE = 16.0


def tolerance(tokens, hidden=16, ffn_hidden=32, experts=4, k=2) -> float:
    """The most `ep_parity`'s and `ep_dp_parity`'s differences may be on any CPU (fp32): forward
    the router (hidden), its softmax (experts), fc1 (hidden), fc2 (ffn_hidden), the top-k sum
    (k); backward the top-k sum, fc2's and fc1's transposes (hidden, ffn_hidden), the router's
    (experts), the input gradient's k experts + router + aux terms (k + 2); the weight gradients'
    sum over every rank's tokens, the aux loss (2 experts), the ranks' reduction and its division
    (len(tokens) + 1)."""
    from labkit.numerics import chain_bound
    return chain_bound([hidden, experts, hidden, ffn_hidden, k, k, hidden, ffn_hidden, experts, k + 2,
                        sum(tokens), 2 * experts, len(tokens) + 1], SCALE)


def _reference(data, **kw):
    ref = build(**kw)
    outs = []
    for x, w in data:
        x = x.clone().requires_grad_()
        y = ref(x)
        ((y * w).sum() + ref.aux_loss).backward()
        outs.append((y.detach(), x.grad, ref.routing["keep"], ref.tokens_per_expert))
    return ref, outs


def _received_per_expert(ep) -> torch.Tensor:
    """(E,) how many of this rank's token copies each expert received, read on the experts'
    ranks (their `received` matrices, gathered): what crossed the all-to-all, not the router's
    plan."""
    group = ep.ep_group
    recv = ep.received                                 # (n, L): rows per source rank, local expert
    every = [torch.zeros_like(recv) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, recv.contiguous(), group=group)
    me = dist.get_rank(group)
    return torch.cat([m[me] for m in every])


def _compare(ep, ref, outs, data, me, n_world) -> dict:
    x, w = data[me]
    x = x.clone().requires_grad_()
    y = ep(x)
    ((y * w).sum() + ep.aux_loss).backward()
    y_ref, gx_ref, keep_ref, tpe_ref = outs[me]
    got = _received_per_expert(ep)
    res = {"output": (y - y_ref).abs().max().item() if y.numel() else 0.0,
           "input grad": (x.grad - gx_ref).abs().max().item() if y.numel() else 0.0,
           # the EP side from what the experts received; which copies are dropped is the
           # capacity rule, tested against formulas.kept in tests/moe/test_moe.py
           "received = one device": bool(torch.equal(got.cpu(), tpe_ref.cpu())),
           "dropped": int(keep_ref.numel() - got.sum()),
           "dropped, one device": int((~keep_ref).sum())}
    return res, ep


def _param_diffs(ep, ref, n_world) -> dict:
    full = dict(ref.named_parameters())
    out = {}
    for name, p in ep.named_parameters():
        ref_name = name
        if name.startswith("experts."):
            i = int(name.split(".")[1])
            ref_name = f"experts.{ep.first_expert + i}." + name.split(".", 2)[2]
        out[ref_name] = (p.grad - full[ref_name].grad / n_world).abs().max().item()
    return out


def ep_parity(k=2, capacity_factor=None, tokens=None, experts=4, hidden=16, ffn_hidden=32,
              impl="torch") -> dict:
    """This rank's max |diff| against one process: output, input grad, every parameter grad."""
    n, me = dist.get_world_size(), dist.get_rank()
    tokens = tokens or tuple(6 + 3 * r for r in range(n))        # uneven by default
    kw = dict(hidden=hidden, ffn_hidden=ffn_hidden, experts=experts, k=k, capacity_factor=capacity_factor)
    data = rank_tokens(tokens, hidden)
    ref, outs = _reference(data, **kw)
    ep = expert_parallel(build(**kw), impl=impl)
    res, ep = _compare(ep, ref, outs, data, me, n)
    reduce_gradients(ep)
    res.update(_param_diffs(ep, ref, n))
    return res


def _groups(ep_size):
    """(ep group, dp group) of this rank; expert-parallel ranks adjacent (EP inside DP)."""
    n, me = dist.get_world_size(), dist.get_rank()
    from labkit.comm.groups import once
    eps, dps = once(("moe.parity", n, ep_size), lambda: (
        [dist.new_group(list(range(i, i + ep_size))) for i in range(0, n, ep_size)],
        [dist.new_group(list(range(j, n, ep_size))) for j in range(ep_size)]))
    return eps[me // ep_size], dps[me % ep_size]


def ep_dp_parity(ep_size=2, k=2, capacity_factor=None, tokens=None, experts=4, hidden=16,
                 ffn_hidden=32, dp_reduce=True) -> dict:
    """EP inside DP: experts sharded over `ep_size` adjacent ranks, replicated over the others."""
    n, me = dist.get_world_size(), dist.get_rank()
    tokens = tokens or tuple(5 + 2 * r for r in range(n))
    kw = dict(hidden=hidden, ffn_hidden=ffn_hidden, experts=experts, k=k, capacity_factor=capacity_factor)
    data = rank_tokens(tokens, hidden)
    ref, outs = _reference(data, **kw)
    ep_group, dp_group = _groups(ep_size)
    ep = expert_parallel(build(**kw), ep_group)
    res, ep = _compare(ep, ref, outs, data, me, n)
    reduce_gradients(ep, world=None, dp_group=dp_group if dp_reduce else None)
    res.update(_param_diffs(ep, ref, n))
    return res


def skewed(moe: MoE, skew: float, experts_favoured: int):
    """Push the router towards the first `experts_favoured` experts (tokens have mean +1)."""
    with torch.no_grad():
        moe.router.weight[:experts_favoured] += skew / moe.hidden
    return moe


def ep_traffic(tokens=128, hidden=64, ffn_hidden=32, experts=4, k=2, skew=0.0, impl="torch") -> dict:
    """Bytes this rank sent in the split exchange, the dispatch and the combine of one forward,
    and the payload the formulas give from the routing (the count matrix, all ranks')."""
    from labkit.moe import alltoall
    n, me = dist.get_world_size(), dist.get_rank()
    moe = expert_parallel(skewed(build(hidden, ffn_hidden, experts, k), skew, experts // n), impl=impl)
    g = torch.Generator().manual_seed(10 + me)
    x = torch.randn(tokens, hidden, generator=g).to(labkit.device()) + (1.0 if skew else 0.0)   # skewed: mean +1
    sent = []
    real = alltoall._exchange

    def counted(*a):
        with traffic.measure(sync=True, group=moe.ep_group) as m:
            out = real(*a)
        sent.append(m.sent)
        return out
    moe(x)                                             # warm-up: gloo sets up its buffers
    alltoall._exchange = counted
    try:
        moe(x)
    finally:
        alltoall._exchange = real
    rows = moe.tokens_per_expert.view(n, -1).sum(1)      # copies this rank sends to each rank
    counts = [torch.zeros_like(rows) for _ in range(n)]
    dist.all_gather(counts, rows)
    matrix = [c.tolist() for c in counts]
    return {"splits sent": sent[0], "dispatch sent": sent[1], "combine sent": sent[2],
            "splits formula": formulas.split_exchange_bytes(experts, n),
            "dispatch formula": formulas.dispatch_bytes(matrix, me, hidden),
            "combine formula": formulas.combine_bytes(matrix, me, hidden),
            "uniform formula": formulas.uniform_dispatch_bytes(tokens, hidden, k, n),
            "matrix": matrix, "messages": n - 1}


def state_bytes(experts=8, hidden=16, ffn_hidden=32) -> tuple:
    """(measured, formula): parameters, gradients and Adam's state on this rank after one step
    of an expert-parallel layer, by module 01's accounting, and `formulas.state_bytes_per_rank`."""
    from labkit.memory.accounting import measure
    m = expert_parallel(build(hidden, ffn_hidden, experts))
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(64, hidden).to(labkit.device())).sum().backward()
    reduce_gradients(m)
    for p in m.parameters():                     # an expert no token reached has no gradient yet
        p.grad = torch.zeros_like(p) if p.grad is None else p.grad
    opt.step()
    got = measure(m, opt)
    return ({k: getattr(got, k) for k in ("params", "grads", "momentum", "variance", "other")},
            formulas.state_bytes_per_rank(hidden, ffn_hidden, experts, dist.get_world_size()))
