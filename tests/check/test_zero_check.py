"""labkit.check.zero1_step against a corpus of wrong stage-1 steps, each with its diagnosis,
and correct ones that must pass (4 gloo ranks, vector of 37 elements: uneven shards)."""
import pytest
import torch
import torch.distributed as dist

import labkit
from labkit.comm import chunk_bounds, ring_all_gather, ring_reduce_scatter


def good(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    g = ring_reduce_scatter(grads) / n
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(g)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def good_divmod(params, grads, momentum, lr, beta):
    """Bounds by hand, divide before reducing, momentum as a list entry."""
    rank, n = dist.get_rank(), dist.get_world_size()
    base, extra = divmod(params.numel(), n)
    lo = rank * base + min(rank, extra)
    hi = lo + base + (1 if rank < extra else 0)
    g = ring_reduce_scatter(grads / n)
    if "buf" not in momentum:
        momentum["buf"] = torch.zeros(hi - lo)
    momentum["buf"] = beta * momentum["buf"] + g
    params[lo:hi] = params[lo:hi] - lr * momentum["buf"]
    ring_all_gather(params)


def no_all_gather(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(ring_reduce_scatter(grads) / n)
    params[lo:hi] -= lr * buf


def equal_shards(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    s = params.numel() // n
    lo, hi = rank * s, (rank + 1) * s
    g = grads.clone()
    dist.all_reduce(g)
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(g[lo:hi] / n)
    params[lo:hi] -= lr * buf
    out = [torch.empty(s) for _ in range(n)]
    dist.all_gather(out, params[lo:hi].clone())
    params[:n * s] = torch.cat(out)


def equal_shards_list_state(params, grads, momentum, lr, beta):
    """Equal shards of L // N, momentum kept in a list (the state check cannot see its size)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    s = params.numel() // n
    lo, hi = rank * s, (rank + 1) * s
    g = ring_reduce_scatter(grads) / n
    buf = momentum.setdefault("m", [torch.zeros(s)])[0]
    own = chunk_bounds(params.numel(), n)[rank]
    buf.mul_(beta).add_(g[:s] if own[0] == lo else params[lo:hi] * 0)
    params[lo:hi] -= lr * buf
    full = torch.empty(n * s)
    dist.all_gather_into_tensor(full, params[lo:hi].clone())
    params[:n * s] = full


def full_update(params, grads, momentum, lr, beta):
    g = grads.clone()
    dist.all_reduce(g)
    buf = momentum.setdefault("m", torch.zeros(params.numel()))
    buf.mul_(beta).add_(g / dist.get_world_size())
    params -= lr * buf


def no_divide(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(ring_reduce_scatter(grads))
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def divided_twice(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(ring_reduce_scatter(grads / n) / n)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def momentum_forgotten(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = torch.zeros(hi - lo)
    momentum["m"] = buf
    buf.mul_(beta).add_(ring_reduce_scatter(grads) / n)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def local_gradient(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(grads[lo:hi])
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def all_reduce_instead(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    g = grads.clone()
    dist.all_reduce(g)
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(g[lo:hi] / n)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def wrong_state_size(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    s = params.numel() // n                      # the momentum buffer sized L // N
    buf = momentum.setdefault("m", torch.zeros(s))
    g = ring_reduce_scatter(grads) / n
    buf.mul_(beta).add_(g[:s])
    params[lo:lo + s] -= lr * buf
    ring_all_gather(params)


def shard_of_wrong_rank(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, _ = chunk_bounds(params.numel(), n)[(rank + 1) % n]     # the neighbour's offset
    g = ring_reduce_scatter(grads) / n
    buf = momentum.setdefault("m", torch.zeros(g.numel()))
    buf.mul_(beta).add_(g)
    seg = params[lo:lo + g.numel()]
    seg -= lr * buf[:seg.numel()]
    ring_all_gather(params)


def stub(params, grads, momentum, lr, beta):
    raise NotImplementedError("exercise: replace this line with your code")


def crashes(params, grads, momentum, lr, beta):
    shards = params.view(dist.get_world_size(), -1)     # 37 elements do not split into 4 rows
    shards[dist.get_rank()] -= lr * grads[:shards.shape[1]]


# found walking through the learner copy of notebook 04
def reduced_shard_indexed_again(params, grads, momentum, lr, beta):
    """Takes [lo:hi] of what ring_reduce_scatter returned, which is already the shard: empty
    on ranks 1..3, so they raise while rank 0 waits in the all-gather."""
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    g = ring_reduce_scatter(grads)[lo:hi] / n
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(g)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def torch_reduce_scatter(params, grads, momentum, lr, beta):
    """torch's reduce_scatter_tensor on 37 elements: it needs equal shards."""
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    g = torch.empty(hi - lo)
    dist.reduce_scatter_tensor(g, grads)
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(g / n)
    params[lo:hi] -= lr * buf
    ring_all_gather(params)


def torch_chunk_shards(params, grads, momentum, lr, beta):
    """params.chunk(n): 10, 10, 10, 7 where the ring's shards are 10, 9, 9, 9."""
    rank, n = dist.get_rank(), dist.get_world_size()
    shard = params.chunk(n)[rank]
    g = ring_reduce_scatter(grads) / n
    buf = momentum.setdefault("m", torch.zeros(shard.numel()))
    buf.mul_(beta).add_(torch.nn.functional.pad(g, (0, max(0, shard.numel() - g.numel())))[:shard.numel()])
    shard -= lr * buf
    ring_all_gather(params)


def gather_before_update(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(ring_reduce_scatter(grads) / n)
    ring_all_gather(params)
    params[lo:hi] -= lr * buf


def gather_on_rank0_only(params, grads, momentum, lr, beta):
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = chunk_bounds(params.numel(), n)[rank]
    buf = momentum.setdefault("m", torch.zeros(hi - lo))
    buf.mul_(beta).add_(ring_reduce_scatter(grads) / n)
    params[lo:hi] -= lr * buf
    if rank == 0:
        ring_all_gather(params)


CORPUS = [
    (no_all_gather, "only its own shard is up to date"),
    (equal_shards, "equal shards of 37 // 4 = 9 leave 1 element(s) to no rank"),
    (equal_shards_list_state, "elements [9, 10, 11, 12] were updated by no rank"),
    (full_update, "keeps optimizer state for all 37 elements"),
    (no_divide, "4 times too large (a factor N = 4)"),
    (divided_twice, "1/4 of one process's (a factor 1/N): the gradient was divided by 4 twice"),
    (momentum_forgotten, "momentum not kept"),
    (local_gradient, "updated its shard with its own local gradient"),
    (all_reduce_instead, "3/2 as much: an all-reduce, 2(N-1)/N, plus the all-gather"),
    (wrong_state_size, "wrong shard bounds"),
    (shard_of_wrong_rank, "no element changed on any rank"),
    (crashes, "failed on rank"),
    (reduced_shard_indexed_again, "ring_reduce_scatter already returns just your shard"),
    (torch_reduce_scatter, "need a length that the world size divides"),
    (torch_chunk_shards, "params.chunk(4) cuts 10, 10, 10, 7"),
    (gather_before_update, "after updating your shard, all-gather"),
    (gather_on_rank0_only, "while ranks 1, 2, 3 had returned from your function"),
]
SLOW = {reduced_shard_indexed_again: 9, gather_on_rank0_only: 15}   # seconds: ranks replaced


@pytest.mark.parametrize("fn,diagnosis", CORPUS, ids=[f.__name__ for f, _ in CORPUS])
def test_wrong_answers_get_their_diagnosis(fn, diagnosis, cluster4, capsys):
    import time
    t0 = time.perf_counter()
    assert labkit.check.zero1_step(fn, cluster=cluster4) is False
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("zero1_step: FAIL") and diagnosis in line, line
    assert time.perf_counter() - t0 < SLOW.get(fn, 3), f"judged in {time.perf_counter() - t0:.1f} s"
    assert cluster4.run(lambda: 1) == [1] * 4          # still usable


@pytest.mark.parametrize("fn", [good, good_divmod])
def test_correct_answers_pass(fn, cluster4, capsys):
    assert labkit.check.zero1_step(fn, cluster=cluster4) is True
    assert capsys.readouterr().out.startswith("zero1_step: pass")


def test_stub_is_not_implemented(cluster4, capsys):
    assert labkit.check.zero1_step(stub, cluster=cluster4) is False
    assert "not implemented yet" in capsys.readouterr().out


def test_the_tolerances_scales_hold():
    """labkit.check.zero.TOL takes trial's local gradients below 4 and |p| below 5 (derived there)."""
    from labkit.check.zero import TOL
    from labkit.zero.exercise import local_grad
    g = max(local_grad(37, s, r).abs().max().item() for s in range(3) for r in range(8))
    init = torch.randn(37, generator=torch.Generator().manual_seed(1))
    assert g <= 4.0 and init.abs().max().item() + 0.1 * (1 + 1.9 + 2.71) * 4.0 <= 5.0
    assert 1e-6 < TOL < 1e-5, TOL
