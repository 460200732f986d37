"""Expert parallelism applied from outside: a one-device `MoE`'s experts sharded over a group.

    moe = expert_parallel(MoE(64, 128, 8, k=2), group)   # same seed on every rank; in place
    y = moe(x_local)              # this rank's tokens: what the one-device layer gives on them
    reduce_gradients(moe, world=None, dp_group=None)     # after backward: see below

Rank r of n keeps experts r E/n .. (r+1) E/n - 1 (E/n each). Its forward:
 1. routes its own tokens (router replicated), drops over capacity as the one-device layer does
    on these tokens, sorts the token copies by expert: expert e lives on rank e // (E/n);
 2. exchanges split sizes: one all-to-all of E/n counts per rank pair, so each rank knows how
    many rows it will receive from each rank for each of its experts;
 3. dispatch: all-to-all of the rows (uneven splits);
 4. regroups what arrived (ordered by source rank, then expert) by local expert, runs each
    expert once, puts the rows back in arrival order;
 5. combine: the reverse all-to-all; then gates x rows, added into each token's output here.

Gradients: backward runs the two all-to-alls in reverse, so an expert's gradient holds the
contributions of every rank's tokens, the router's only this rank's. `reduce_gradients` averages
the loss over all ranks: the router (replicated everywhere) is summed over `world`, an expert over
`dp_group` (the ranks holding a copy of it, when expert parallelism runs inside data parallelism),
both divided by the number of ranks in `world`.
"""
import torch
import torch.distributed as dist
import torch.nn as nn

from labkit.i18n import tr, tr_join
from labkit.moe.alltoall import all_to_all, exchange_counts
from labkit.moe.layer import MoE, run_grouped


def _local_order(recv: torch.Tensor) -> torch.Tensor:
    """recv (n, L): rows arrive grouped by source rank, then local expert. Returns the indices
    that regroup them by local expert (source order kept inside an expert)."""
    n, L = recv.shape
    start = torch.cumsum(recv.reshape(-1), 0) - recv.reshape(-1)
    start = start.view(n, L)
    idx = [torch.arange(int(start[j, l]), int(start[j, l] + recv[j, l]), device=recv.device)
           for l in range(L) for j in range(n)]
    return torch.cat(idx) if idx else torch.zeros(0, dtype=torch.long, device=recv.device)


def check_shapes(x: torch.Tensor, hidden: int, group=None) -> None:
    """Every rank of the group learns every rank's token shape (one small all-gather), so a
    rank with the wrong hidden size stops all of them at once, each naming it, instead of
    leaving the others waiting in the all-to-all."""
    n = dist.get_world_size(group)
    mine = torch.tensor([x.dim(), x.shape[-1] if x.dim() else 0], dtype=torch.long, device=x.device)
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine, group=group)
    bad = [(j, w) for j, (d, w) in enumerate(t.tolist() for t in every) if d != 2 or w != hidden]
    if bad:
        glob = (lambda g: g) if group is None else (lambda g: dist.get_global_rank(group, g))
        who = tr_join(tr("rank {r} has hidden size {w}", r=glob(j), w=w) for j, w in bad)
        raise ValueError(tr("MoE on rank {rank}: expected tokens of shape (tokens, {hidden}) on every rank, "
                            "but {who}: give every rank tokens of the layer's hidden size",
                            rank=dist.get_rank(), hidden=hidden, who=who))


class ExpertParallelMoE(MoE):
    """A `MoE` after `expert_parallel`: `experts` holds this rank's experts only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_shapes(x, self.hidden, self.ep_group)
        return super().forward(x)

    def experts_forward(self, xs: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        group, n, L = self.ep_group, self.ep_size, self.num_experts // self.ep_size
        per_expert = torch.bincount(expert, minlength=self.num_experts)
        recv = exchange_counts(per_expert, group, self.impl)                   # (n, L)
        send_splits = per_expert.view(n, L).sum(1).tolist()
        recv_splits = recv.sum(1).tolist()
        arrived = all_to_all(xs, recv_splits, send_splits, group, self.impl)   # dispatch
        order = _local_order(recv).to(xs.device)
        out = run_grouped(self.experts, arrived[order], recv.sum(0))
        back = torch.empty_like(out).index_copy(0, order, out) if out.shape[0] else out
        self.received = recv                          # rows per (source rank, local expert)
        return all_to_all(back, send_splits, recv_splits, group, self.impl)    # combine


def expert_parallel(moe: MoE, group=None, impl: str = "torch") -> MoE:
    """Shard `moe`'s experts over `group` in place (every rank built it with the same seed);
    returns it. impl: "torch" (dist.all_to_all_single) or "p2p" (written on send/recv)."""
    if not isinstance(moe, MoE):
        raise TypeError(tr("expert_parallel expects a labkit.moe.MoE, got {kind}", kind=type(moe).__name__))
    r, n = dist.get_rank(group), dist.get_world_size(group)
    if moe.num_experts % n:
        raise ValueError(tr("expert_parallel on rank {rank}: {e} experts do not divide over {n} ranks "
                            "({e} / {n} = {q:.2f}); use a number of experts that is a multiple of the "
                            "group size", rank=dist.get_rank(), e=moe.num_experts, n=n, q=moe.num_experts / n))
    if len(moe.experts) != moe.num_experts:
        raise ValueError(tr("expert_parallel on rank {rank}: this MoE is already sharded ({k} of {e} "
                            "experts here)", rank=dist.get_rank(), k=len(moe.experts), e=moe.num_experts))
    L = moe.num_experts // n
    moe.experts = nn.ModuleList(list(moe.experts)[r * L:(r + 1) * L])
    moe.first_expert, moe.ep_group, moe.ep_size, moe.impl = r * L, group, n, impl
    moe.received = None
    moe.__class__ = ExpertParallelMoE       # as FSDP2's fully_shard: same object, new forward
    return moe


def reduce_gradients(moe: MoE, world=None, dp_group=None) -> None:
    """Average the gradient of the mean loss over the ranks of `world` (see the module)."""
    size = dist.get_world_size(world)
    for name, p in moe.named_parameters():
        if p.grad is None:
            continue
        expert = name.startswith("experts.")
        if not expert or dp_group is not None:
            dist.all_reduce(p.grad, group=dp_group if expert else world)
        p.grad.div_(size)
