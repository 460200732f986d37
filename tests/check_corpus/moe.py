"""Answers to notebook 13's exercise: fn(xs, expert, gate, experts, group) -> gate x expert(row)
for every row of xs, the experts sharded over the ranks (see labkit.check.moe)."""
import torch
import torch.distributed as dist

from labkit.moe import all_to_all


def _splits(expert, n_experts, group):
    """(counts (n, L) this rank receives, rows sent to each rank, rows received from each)."""
    n = dist.get_world_size(group)
    per_expert = torch.bincount(expert, minlength=n_experts)
    recv = torch.empty_like(per_expert)
    dist.all_to_all_single(recv, per_expert, group=group)
    recv = recv.view(n, -1)
    return recv, per_expert.view(n, -1).sum(1).tolist(), recv.sum(1).tolist()


def _regroup(recv):
    """Indices that put rows arrived (by source rank, then local expert) in local-expert order."""
    n, L = recv.shape
    start = (torch.cumsum(recv.reshape(-1), 0) - recv.reshape(-1)).view(n, L)
    return torch.cat([torch.arange(int(start[j, l]), int(start[j, l] + recv[j, l]))
                      for l in range(L) for j in range(n)])


def _run(experts, rows, counts):
    return torch.cat([ex(p) for ex, p in zip(experts, torch.split(rows, counts.tolist()))])


def right(xs, expert, gate, experts, group=None):
    n_experts = len(experts) * dist.get_world_size(group)
    recv, send, got = _splits(expert, n_experts, group)
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    back = torch.empty_like(out).index_copy(0, order, out)
    return gate[:, None] * all_to_all(back, send, got, group)


def right_library(xs, expert, gate, experts, group=None):
    """The same steps through labkit's helpers, the combine undone with an inverse argsort."""
    from labkit.moe import exchange_counts
    n = dist.get_world_size(group)
    per_expert = torch.bincount(expert, minlength=len(experts) * n)
    recv = exchange_counts(per_expert, group)
    send, got = per_expert.view(n, -1).sum(1).tolist(), recv.sum(1).tolist()
    arrived = all_to_all(xs, got, send, group)
    local = torch.arange(len(experts)).repeat(n).repeat_interleave(recv.reshape(-1))
    order = torch.argsort(local, stable=True)
    out = _run(experts, arrived[order], recv.sum(0))[torch.argsort(order)]
    return all_to_all(out, send, got, group) * gate.unsqueeze(1)


def stub(xs, expert, gate, experts, group=None):
    raise NotImplementedError("exercise: replace this line with your code")


def splits_not_exchanged(xs, expert, gate, experts, group=None):
    n = dist.get_world_size(group)
    send = torch.bincount(expert, minlength=len(experts) * n).view(n, -1).sum(1).tolist()
    arrived = all_to_all(xs, send, send, group)           # "I receive what I send"
    return gate[:, None] * all_to_all(arrived, send, send, group)


def splits_by_expert(xs, expert, gate, experts, group=None):
    recv, send, _ = _splits(expert, len(experts) * dist.get_world_size(group), group)
    got = recv.sum(0).tolist()                            # per local expert, not per source rank
    arrived = all_to_all(xs, got, send, group)
    return gate[:, None] * all_to_all(arrived, send, got, group)


def combine_not_swapped(xs, expert, gate, experts, group=None):
    recv, send, got = _splits(expert, len(experts) * dist.get_world_size(group), group)
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    back = torch.empty_like(out).index_copy(0, order, out)
    return gate[:, None] * all_to_all(back, got, send, group)   # the dispatch's splits again


def not_inverted(xs, expert, gate, experts, group=None):
    recv, send, got = _splits(expert, len(experts) * dist.get_world_size(group), group)
    arrived = all_to_all(xs, got, send, group)
    out = _run(experts, arrived[_regroup(recv)], recv.sum(0))
    return gate[:, None] * all_to_all(out, send, got, group)       # still grouped by expert


def no_regroup(xs, expert, gate, experts, group=None):
    recv, send, got = _splits(expert, len(experts) * dist.get_world_size(group), group)
    arrived = all_to_all(xs, got, send, group)
    out = _run(experts, arrived, recv.sum(0))                       # arrival order taken as expert order
    return gate[:, None] * all_to_all(out, send, got, group)


def gates_twice(xs, expert, gate, experts, group=None):
    return gate[:, None] * right(xs, expert, gate, experts, group)


def no_gates(xs, expert, gate, experts, group=None):
    return right(xs, expert, torch.ones_like(gate), experts, group)


def round_robin(xs, expert, gate, experts, group=None):
    n = dist.get_world_size(group)
    L = len(experts)
    placed = (expert % n) * L + expert // n                # expert e "on rank e % n"
    order = torch.argsort(placed, stable=True)
    out = right(xs[order], placed[order], gate[order], experts, group)
    return torch.empty_like(out).index_copy(0, order, out)


def global_index(xs, expert, gate, experts, group=None):
    n = dist.get_world_size(group)
    recv, send, got = _splits(expert, len(experts) * n, group)
    arrived = all_to_all(xs, got, send, group)
    first = dist.get_rank(group) * len(experts)
    local = [experts[first + l] for l in range(len(experts))]       # global index into local list
    order = _regroup(recv)
    out = _run(local, arrived[order], recv.sum(0))
    back = torch.empty_like(out).index_copy(0, order, out)
    return gate[:, None] * all_to_all(back, send, got, group)


def torch_rows(xs, expert, gate, experts, group=None):
    recv, send, got = _splits(expert, len(experts) * dist.get_world_size(group), group)
    arrived = xs.new_empty(sum(got), xs.shape[1])
    dist.all_to_all_single(arrived, xs, got, send, group=group)     # no autograd
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    back = torch.empty_like(out).index_copy(0, order, out)
    final = torch.empty_like(xs)
    dist.all_to_all_single(final, back.detach(), send, got, group=group)
    return gate[:, None] * final


def blocking_send(xs, expert, gate, experts, group=None):
    """Hand-written exchange: every rank sends first, then receives: nobody posts a recv."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    recv, send, got = _splits(expert, len(experts) * n, group)
    chunks = torch.split(xs.detach(), send)
    for j in range(n):
        if j != r:
            dist.send(chunks[j].contiguous(), j)
    return right(xs, expert, gate, experts, group)


RIGHT = [("right", right), ("right_library", right_library)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("splits not exchanged", splits_not_exchanged, "exchange the split sizes first", "clean"),
    ("splits per expert", splits_by_expert, "exchange the split sizes first", "clean"),
    ("combine splits not swapped", combine_not_swapped, "swap input and output splits", "clean"),
    ("permutation not inverted", not_inverted, "undo the regrouping", "clean"),
    ("not regrouped", no_regroup, "regroup them by expert", "clean"),
    ("gates twice", gates_twice, "gates are applied twice", "clean"),
    ("no gates", no_gates, "gates are missing", "clean"),
    ("round-robin experts", round_robin, "round-robin", "clean"),
    ("global expert index", global_index, "experts[e - rank * E/n]", "clean"),
    ("rows by torch's all_to_all_single", torch_rows, "does not differentiate", "clean"),
    ("blocking send", blocking_send, "hung", "hang"),
]
