"""labkit.check.ring_all_reduce: passes a correct ring, and names what is wrong in broken ones
(wrong neighbour, missing step, wrong chunk, deadlock, stub)."""
import pytest
import torch
import torch.distributed as dist

import labkit
import labkit.check
from labkit.comm import chunk_bounds


def _ring(tensor, group=None, rs_steps=None, right_of=lambda r, n: (r + 1) % n,
          left_of=lambda r, n: (r - 1) % n, chunk_shift=0):
    """A textbook ring all-reduce with knobs to break it."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    flat = tensor.view(-1)
    chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    right, left = right_of(rank, n), left_of(rank, n)

    def exchange(send, recv):
        reqs = []
        if send.numel():
            reqs.append(dist.isend(send, group=group, group_dst=right))
        if recv.numel():
            reqs.append(dist.irecv(recv, group=group, group_src=left))
        for q in reqs:
            q.wait()

    for s in range(n - 1 if rs_steps is None else rs_steps(n)):        # reduce-scatter
        send, recv = chunks[(rank - s + chunk_shift) % n], chunks[(rank - s - 1) % n]
        buf = torch.empty_like(recv)
        exchange(send, buf)
        recv += buf
    for s in range(n - 1):                                                  # all-gather
        exchange(chunks[(rank - s + 1) % n], chunks[(rank - s) % n])
    return tensor


def good(tensor, group=None):
    return _ring(tensor, group)


def wrong_neighbour(tensor, group=None):      # sends left and receives from the right
    return _ring(tensor, group, right_of=lambda r, n: (r - 1) % n, left_of=lambda r, n: (r + 1) % n)


def missing_step(tensor, group=None):         # one reduce-scatter step too few
    return _ring(tensor, group, rs_steps=lambda n: n - 2)


def wrong_chunk(tensor, group=None):          # sends the chunk one further along
    return _ring(tensor, group, chunk_shift=1)


def deadlock(tensor, group=None):             # everyone receives before anyone sends
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    dist.recv(tensor, group=group, group_src=(rank - 1) % n)
    dist.send(tensor, group=group, group_dst=(rank + 1) % n)
    return tensor


def stub(tensor, group=None):
    raise NotImplementedError


def _line(capsys, fn, cluster, **kw):
    ok = labkit.check.ring_all_reduce(fn, cluster=cluster, **kw)
    out = capsys.readouterr().out.strip().splitlines()
    lines = [ln for ln in out if ln.startswith("ring_all_reduce:")]
    assert len(lines) == 1, out
    return ok, lines[0]


def test_correct_rings_pass(capsys, cluster4):
    from labkit import comm
    for fn in (good, comm.ring_all_reduce, comm.ring_all_reduce_simple):
        ok, line = _line(capsys, fn, cluster4)
        assert ok and line.startswith("ring_all_reduce: pass (world sizes 2, 3, 4;"), line


@pytest.mark.parametrize("fn, words", [
    (wrong_neighbour, "the ring sends to the right-hand neighbour"),
    (missing_step, "a step is missing"),
    (wrong_chunk, "sent chunk"),
], ids=["wrong-neighbour", "missing-step", "wrong-chunk"])
def test_broken_rings_are_diagnosed(capsys, cluster4, fn, words):
    ok, line = _line(capsys, fn, cluster4)
    assert not ok and "FAIL" in line and words in line, line
    assert "rank " in line and "world size" in line and "send" in line, line


def test_stub_is_not_implemented_yet(capsys, cluster2):
    ok, line = _line(capsys, stub, cluster2)
    assert not ok and "not implemented yet" in line, line


def test_deadlock_says_where_each_rank_waits(capsys):
    with labkit.Cluster(3, backend="gloo", spares=0, timeout=60) as c:
        ok, line = _line(capsys, deadlock, c, timeout=3)
    assert not ok and line.startswith("ring_all_reduce: FAIL (hung (world size 2"), line
    assert "rank 0 waits in recv()" in line and "test_comm_check.py" in line, line
    assert "rank 2 is outside this group" in line, line
