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


def _exchange_rest(xs, gate, experts, recv, send, got, group):
    """The rest of a right answer once the counts are known: dispatch, the experts in expert
    order, back to arrival order, combine, gate (each wrong answer below makes its own mistake
    before this point)."""
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    back = torch.empty_like(out).index_copy(0, order, out)
    return gate[:, None] * all_to_all(back, send, got, group)


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


# -- issue 33 -----------------------------------------------------------------------------------
def ignores_group(xs, expert, gate, experts, group=None):
    """Right on the whole world; every collective and size taken without the group."""
    return right(xs, expert, gate, experts, None)


def experts_no_grad(xs, expert, gate, experts, group=None):
    n_experts = len(experts) * dist.get_world_size(group)
    recv, send, got = _splits(expert, n_experts, group)
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    with torch.no_grad():
        out = _run(experts, arrived[order], recv.sum(0))
    back = torch.empty_like(out).index_copy(0, order, out)
    return gate[:, None] * all_to_all(back, send, got, group)


def bincount_no_minlength(xs, expert, gate, experts, group=None):
    """Exchanges the counts, but bincount stops at the largest expert this rank routes to."""
    n = dist.get_world_size(group)
    per_expert = torch.bincount(expert)
    recv = torch.empty_like(per_expert)
    dist.all_to_all_single(recv, per_expert, group=group)
    recv = recv.view(n, -1)
    send, got = per_expert.view(n, -1).sum(1).tolist(), recv.sum(1).tolist()
    return _exchange_rest(xs, gate, experts, recv, send, got, group)


def splits_per_expert_list(xs, expert, gate, experts, group=None):
    """Exchanges the counts, then passes the per-expert counts (E entries) as split lists."""
    n_experts = len(experts) * dist.get_world_size(group)
    per_expert = torch.bincount(expert, minlength=n_experts)
    recv = torch.empty_like(per_expert)
    dist.all_to_all_single(recv, per_expert, group=group)
    arrived = all_to_all(xs, recv.tolist(), per_expert.tolist(), group)
    return gate[:, None] * all_to_all(arrived, per_expert.tolist(), recv.tolist(), group)


# -- new wrong answers ---------------------------------------------------------------------------
def world_size_without_group(xs, expert, gate, experts, group=None):
    n = dist.get_world_size()                       # the whole world, not the group
    per_expert = torch.bincount(expert, minlength=len(experts) * n)
    recv = torch.empty_like(per_expert)
    dist.all_to_all_single(recv, per_expert, group=group)
    recv = recv.view(n, -1)
    send, got = per_expert.view(n, -1).sum(1).tolist(), recv.sum(1).tolist()
    return _exchange_rest(xs, gate, experts, recv, send, got, group)


def four_ranks_written_in(xs, expert, gate, experts, group=None):
    n, L = 4, len(experts)
    per_expert = torch.bincount(expert, minlength=L * n)
    recv = torch.empty_like(per_expert)
    dist.all_to_all_single(recv, per_expert, group=group)
    recv = recv.view(n, L)
    send, got = per_expert.view(n, L).sum(1).tolist(), recv.sum(1).tolist()
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    return gate[:, None] * all_to_all(torch.empty_like(out).index_copy(0, order, out), send, got, group)


def two_experts_written_in(xs, expert, gate, experts, group=None):
    n, L = dist.get_world_size(group), 2
    per_expert = torch.bincount(expert, minlength=L * n)
    recv = torch.empty_like(per_expert)
    dist.all_to_all_single(recv, per_expert, group=group)
    recv = recv.view(n, L)
    send, got = per_expert.view(n, L).sum(1).tolist(), recv.sum(1).tolist()
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    return gate[:, None] * all_to_all(torch.empty_like(out).index_copy(0, order, out), send, got, group)


def rows_detached(xs, expert, gate, experts, group=None):
    return right(xs.detach(), expert, gate, experts, group)


def gate_before_experts(xs, expert, gate, experts, group=None):
    """The gate applied to the rows before the experts: g x expert(row) != expert(g x row)."""
    return right(gate[:, None] * xs, expert, torch.ones_like(gate), experts, group)


def xs_scaled_in_place(xs, expert, gate, experts, group=None):
    xs.mul_(1.0)
    return right(xs, expert, gate, experts, group)


def counts_by_all_gather_wrong_row(xs, expert, gate, experts, group=None):
    """Counts all-gathered, but this rank's own row read (what it sends), not its column."""
    n = dist.get_world_size(group)
    L = len(experts)
    per_expert = torch.bincount(expert, minlength=L * n)
    table = [torch.empty_like(per_expert) for _ in range(n)]
    dist.all_gather(table, per_expert, group=group)
    me = dist.get_rank(group)
    recv = torch.stack(table)[me].view(n, L)          # should be [:, me * L:(me + 1) * L]
    send, got = per_expert.view(n, L).sum(1).tolist(), recv.sum(1).tolist()
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    return gate[:, None] * all_to_all(torch.empty_like(out).index_copy(0, order, out), send, got, group)


def experts_in_arrival_order_by_source(xs, expert, gate, experts, group=None):
    """Each source rank's rows split by expert, but run with the experts in source order."""
    recv, send, got = _splits(expert, len(experts) * dist.get_world_size(group), group)
    arrived = all_to_all(xs, got, send, group)
    parts = torch.split(arrived, recv.reshape(-1).tolist())
    out = torch.cat([experts[i % len(experts)](p) if (i // len(experts)) % 2 == 0
                     else experts[(i + 1) % len(experts)](p) for i, p in enumerate(parts)])
    return gate[:, None] * all_to_all(out, send, got, group)


def no_combine(xs, expert, gate, experts, group=None):
    """The expert outputs returned where they were computed: no second all-to-all."""
    recv, send, got = _splits(expert, len(experts) * dist.get_world_size(group), group)
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    return torch.empty_like(out).index_copy(0, order, out)


def counts_all_reduced(xs, expert, gate, experts, group=None):
    """The counts summed over the ranks (all_reduce) instead of exchanged (all-to-all)."""
    n = dist.get_world_size(group)
    L = len(experts)
    per_expert = torch.bincount(expert, minlength=L * n)
    total = per_expert.clone()
    dist.all_reduce(total, group=group)
    me = dist.get_rank(group)
    recv = total[me * L:(me + 1) * L].repeat(n, 1) // n
    send, got = per_expert.view(n, L).sum(1).tolist(), recv.sum(1).tolist()
    arrived = all_to_all(xs, got, send, group)
    order = _regroup(recv)
    out = _run(experts, arrived[order], recv.sum(0))
    return gate[:, None] * all_to_all(torch.empty_like(out).index_copy(0, order, out), send, got, group)


def experts_at_home(xs, expert, gate, experts, group=None):
    """No dispatch: this rank's experts on this rank's rows, expert index taken modulo E/n."""
    L = len(experts)
    out = torch.stack([experts[int(e) % L](x) for x, e in zip(xs, expert)])
    return gate[:, None] * out


def returns_float32(xs, expert, gate, experts, group=None):
    return right(xs, expert, gate, experts, group).float().double()


RIGHT = [("right", right), ("right_library", right_library)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("splits not exchanged", splits_not_exchanged, "exchange the split sizes first", "clean"),
    ("splits per expert", splits_by_expert, "the split list counts rows from each source rank", "clean"),
    ("combine splits not swapped", combine_not_swapped, "swap input and output splits", "clean"),
    ("permutation not inverted", not_inverted, "undo the regrouping", "clean"),
    ("not regrouped", no_regroup, "regroup them by expert", "clean"),
    ("gates twice", gates_twice, "gates are applied twice", "clean"),
    ("no gates", no_gates, "gates are missing", "clean"),
    ("round-robin experts", round_robin, "round-robin", "clean"),
    ("global expert index", global_index, "experts[e - rank * E/n]", "clean"),
    ("rows by torch's all_to_all_single", torch_rows, "does not differentiate", "clean"),
    # issue 33: passed, or sent to the wrong fix
    ("group ignored", ignores_group, "3 experts per rank, the function's `group` argument): rank 0: in the case on a group of size ", "clean"),
    ("experts under torch.no_grad()", experts_no_grad, "your experts ran with autograd off (torch.no_grad() or inference_mode)", "clean"),
    ("bincount without minlength", bincount_no_minlength, "torch.bincount(expert) stops at the largest expert present; count with minlength=E", "clean"),
    ("split lists of length E", splits_per_expert_list, "a split list has one entry per rank (rows to or from each rank), not one per expert", "clean"),
    # new
    ("world size without the group", world_size_without_group, "asked dist.get_world_size() without the group", "clean"),
    ("4 ranks written in", four_ranks_written_in, "a split list has one entry per rank", "clean"),
    ("2 experts per rank written in", two_experts_written_in, "in the second case", "clean"),
    ("rows detached", rows_detached, "your output is cut off from the rows' graph", "clean"),
    ("gate before the experts", gate_before_experts, "the rows differ from gate x expert(row)", "clean"),
    ("xs changed in place", xs_scaled_in_place, "failed on rank 0: RuntimeError: a leaf Variable that requires grad", "clean"),
    ("counts: own row read, not column", counts_by_all_gather_wrong_row, "exchange the split sizes first", "clean"),
    ("experts picked by position", experts_in_arrival_order_by_source, "rank ", "clean"),
    ("no combine", no_combine, "returned (", "clean"),
    ("counts all-reduced, not exchanged", counts_all_reduced, "exchange the split sizes first", "clean"),
    ("experts run at home", experts_at_home, "went through expert", "clean"),
    ("result through float32", returns_float32, "the rows differ from gate x expert(row) by", "clean"),
    ("blocking send", blocking_send, "hung", "hang"),
]
