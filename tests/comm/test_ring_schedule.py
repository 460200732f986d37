"""formulas.ring_schedule, the one ring schedule every ring in labkit (and the checker) reads:
simulated without processes, it sums every chunk on every rank, for any N and rotation."""
import pytest

from labkit.comm.formulas import chunk_bounds, ring_bytes_exact, ring_schedule


@pytest.mark.parametrize("n", range(1, 7))
@pytest.mark.parametrize("shift", [0, 1, 2])
def test_schedule_sums_every_chunk_on_every_rank(n, shift):
    held = [[{r} for _ in range(n)] for r in range(n)]       # held[rank][chunk]: whose data it holds
    steps = [ring_schedule(r, n, shift) for r in range(n)]
    assert all(len(s) == 2 * (n - 1) for s in steps)
    for k in range(2 * (n - 1)):
        sent = [set(held[r][steps[r][k].send]) for r in range(n)]
        for r in range(n):
            st, left = steps[r][k], (r - 1) % n
            assert steps[left][k].send == st.recv, "a rank receives the chunk its left neighbour sends"
            if st.phase == "reduce-scatter":
                assert not held[r][st.recv] & sent[left], "nothing is added twice"
                held[r][st.recv] |= sent[left]
            else:
                held[r][st.recv] = set(sent[left])
        if k == n - 2:                                        # end of the reduce-scatter
            for r in range(n):
                assert held[r][(r + shift) % n] == set(range(n)), "rank r owns chunk r + shift"
    assert all(c == set(range(n)) for rank in held for c in rank)


def test_labkit_convention_matches_reduce_scatter_tensor():
    # rank r ends the reduce-scatter with chunk r, as torch's reduce_scatter_tensor leaves it
    for n in range(2, 6):
        for r in range(n):
            rs = [st for st in ring_schedule(r, n) if st.phase == "reduce-scatter"]
            assert rs[-1].recv == r
            assert [st.step for st in rs] == list(range(n - 1))


def test_exact_bytes_follow_the_schedule():
    for length, n in [(7, 4), (3, 4), (1001, 3), (10, 2)]:
        sizes = [b - a for a, b in chunk_bounds(length, n)]
        for r in range(n):
            want = sum(sizes[st.send] for st in ring_schedule(r, n)) * 4
            assert ring_bytes_exact(length, n, 4, r) == want
        assert sum(ring_bytes_exact(length, n, 4, r) for r in range(n)) == 2 * (n - 1) * length * 4
