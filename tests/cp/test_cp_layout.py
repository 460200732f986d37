"""Context parallelism's pure maths: which positions each rank holds, the causal work per
rank, bytes on the wire per rank (labkit.cp.layout, labkit.cp.formulas). No processes."""
import pytest

from labkit.cp import formulas as F
from labkit.cp import layout as L


def test_zigzag_chunks_pair_early_with_late():
    assert [L.chunk_ids(r, 4, "zigzag") for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert L.ranges(16, 4, 1, "zigzag") == [(2, 4), (12, 14)]
    assert L.ranges(10, 3, 0, "contiguous") == [(0, 4)]
    assert L.positions(13, 3, 2, "zigzag") == [5, 6, 7, 8]   # chunks 2, 3 of sizes 3,2,2,2,2,2


@pytest.mark.parametrize("layout", L.LAYOUTS)
@pytest.mark.parametrize("seq,n", [(16, 4), (17, 4), (13, 3), (9, 2), (8, 1)])
def test_every_position_on_exactly_one_rank(layout, seq, n):
    assert sorted(L.permutation(seq, n, layout)) == list(range(seq))
    assert sum(L.local_len(seq, n, r, layout) for r in range(n)) == seq


@pytest.mark.parametrize("n", [2, 4, 8])
def test_contiguous_causal_work_grows_with_rank_and_zigzag_balances_it(n):
    s = 64 * n
    cont, zig = L.causal_work(s, n, "contiguous"), L.causal_work(s, n, "zigzag")
    assert sum(cont) == sum(zig) == s * (s + 1) // 2          # the causal triangle
    blk = s // n                # rank r: blk^2 r + blk (blk + 1) / 2 pairs
    assert cont == [blk * blk * r + blk * (blk + 1) // 2 for r in range(n)]
    assert abs(cont[-1] / cont[0] - (2 * n - 1)) < 0.05 * (2 * n - 1)   # ~2N-1 times the first
    assert len(set(zig)) == 1 and L.imbalance(zig) == 1.0
    assert L.imbalance(cont) > 1.8 * n / (n + 1)


def test_blocks_computed_follow_the_mask():
    # contiguous, causal: rank r computes r full blocks and its diagonal
    assert [L.scores_computed(32, 4, r, "contiguous") for r in range(4)] == [64 * (r + 1) for r in range(4)]
    zig = [L.scores_computed(32, 4, r, "zigzag") for r in range(4)]
    assert len(set(zig)) == 1 and zig[0] == 4 * 4 * (2 * 4 + 1)    # chunk i sees i + 1 chunks: 2N+1 pairs of 4 x 4
    assert L.scores_computed(32, 4, 0, "zigzag", causal=False) == 8 * 32
    assert L.pair_kind((4, 8), (0, 4), True) == "full"
    assert L.pair_kind((0, 4), (4, 8), True) == "skip"
    assert L.pair_kind((0, 4), (2, 6), True) == "diagonal"


def test_short_sequences_and_bad_layouts_say_what_to_change():
    with pytest.raises(ValueError, match=r"a sequence of 7 positions cannot be split into the 8 "
                                         r"chunks the zigzag layout needs on 4 ranks"):
        L.ranges(7, 4, 0, "zigzag")
    with pytest.raises(ValueError, match="layout='strided' is not one of"):
        L.ranges(8, 2, 0, "strided")


@pytest.mark.parametrize("layout", L.LAYOUTS)
def test_bytes_per_rank(layout):
    kw = dict(batch=2, kv_heads=2, head_dim=8, itemsize=4, layout=layout)
    s, n = 64, 4
    blk = 2 * 2 * 2 * (s // n) * 8 * 4         # K and V of one rank
    ring, ag = F.wire(s, n, 1, method="ring", **kw), F.wire(s, n, 1, method="allgather", **kw)
    assert ring["forward"]["payload"] == ag["forward"]["payload"] == (n - 1) * blk
    assert ring["backward"]["payload"] == (n - 1) * blk + n * blk     # K/V again + every dK/dV
    assert ag["backward"]["payload"] == (n - 1) * blk                 # reduce-scatter of dK/dV
    assert ring["backward"]["messages"] == 2 * n - 1
    assert ring["forward"]["on the wire"] == (n - 1) * (blk + 96 + 48)
    # uneven: rank r sends the blocks of r, r-1, ..., r-N+2: every block but that of r+1
    odd = F.wire(13, 3, 0, method="ring", batch=1, kv_heads=1, head_dim=1, itemsize=1, layout=layout)
    lens = [L.local_len(13, 3, j, layout) for j in range(3)]
    assert odd["forward"]["payload"] == 2 * (lens[0] + lens[2])
    assert F.wire(9, 1, 0, method="ring", **kw)["backward"]["payload"] == 0
    # 16-bit training: K/V in 2 bytes, the dK/dV accumulators in fp32 (torch's accum_dtype)
    kw16 = dict(kw, itemsize=2)
    half = F.wire(s, n, 1, method="ring", **kw16)["backward"]["payload"]
    mixed = F.wire(s, n, 1, method="ring", grad_itemsize=4, **kw16)["backward"]["payload"]
    assert half == ((n - 1) + n) * blk // 2 and mixed == (n - 1) * blk // 2 + n * blk


def test_ulysses_bytes_stay_flat_when_n_grows_with_s():
    kw = dict(batch=1, heads=32, kv_heads=8, head_dim=128, itemsize=2)
    per = {n: F.ulysses_wire(4096 * n, n, **kw)["payload"] * n // (n - 1) for n in (2, 4, 8, 16)}
    assert len(set(per.values())) == 1                      # b (2h + 2h_kv) (s/N) d e, N-free
    ring = {n: F.wire(4096 * n, n, 0, method="ring", batch=1, kv_heads=8, head_dim=128,
                      itemsize=2)["forward"]["payload"] * n // (n - 1) for n in (2, 4)}
    assert ring[4] == 2 * ring[2]                            # 2 b h_kv s d e: grows with s


def test_score_memory_falls_with_the_degree():
    full = F.score_entries(4096, 1, method="full", heads=8)
    assert F.score_entries(4096, 4, method="allgather", heads=8) == full // 4
    assert F.score_entries(4096, 4, method="ring", heads=8) == full // 16
    # zig-zag: each rank's two chunks of s/(2N) are computed one at a time
    assert F.score_entries(4096, 4, method="allgather", heads=8, layout="zigzag") == full // 8
    assert F.score_entries(4096, 4, method="ring", heads=8, layout="zigzag") == full // 64
    # causal, contiguous: the last rank's queries see every key; rank 0 only its own block
    assert F.score_entries(4096, 4, method="allgather", heads=8, causal=True) == full // 4
    assert F.score_entries(4096, 4, method="ring", heads=8, causal=True) == full // 16


def test_saved_bytes():
    kw = dict(batch=1, heads=4, kv_heads=2, head_dim=8, itemsize=4)
    ring = F.saved_bytes(64, 4, 0, method="ring", **kw)
    ag = F.saved_bytes(64, 4, 0, method="allgather", **kw)
    assert ring == (2 * 4 * 16 * 8 + 4 * 16 + 2 * 2 * 16 * 8) * 4      # q, out, lse, own K/V
    assert ag - ring == 2 * 2 * (64 - 16) * 8 * 4                       # every other K/V block


def test_crossover_block_size_solves_compute_equal_transfer():
    from labkit.cp.runs import crossover
    # transfer 1 ms + 0.01 ms per position, compute 1e-4 ms x L^2: L^2 = 100 L + 10^4, L = 50 (1 + sqrt 5)
    rows = [{"block": L, "transfer s": 1e-3 + 1e-5 * L, "compute s": 1e-7 * L * L} for L in (32, 64, 128, 256)]
    assert abs(crossover(rows) - 50 * (1 + 5 ** 0.5)) < 1e-6

