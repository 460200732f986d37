"""Context-parallel attention on real gloo ranks against one process's attention on the full
sequence: outputs and dq, dk, dv within a derived fp32 bound (labkit.cp.parity.attention_tolerance), ring and all-gather, both layouts, causal and
not, uneven lengths, several heads and grouped-query attention; bytes on the wire; bad input."""
import pytest

from labkit.cp import layout as L
from labkit.cp.parity import (SCALE, attention_parity, attention_tolerance, attention_traffic, attention_work,
                              ulysses_tolerance)

pytestmark = pytest.mark.cluster

# (seq, heads, kv_heads): even, uneven, GQA with an uneven length
SHAPES = [(16, 4, None), (19, 2, None), (23, 4, 2)]


def _all_cases():
    return [dict(seq=s, heads=h, kv_heads=kv, causal=c, method=m, layout=lay)
            for s, h, kv in SHAPES for c in (False, True) for m in ("ring", "allgather")
            for lay in L.LAYOUTS]


def _parity_cases(cases):
    return [attention_parity(**kw) for kw in cases]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_matches_one_process(request, n):
    cluster = request.getfixturevalue(f"cluster{n}")
    cases = _all_cases()
    for rank, diffs in enumerate(cluster.run(_parity_cases, cases)):
        for kw, d in zip(cases, diffs):
            worst = max(d, key=d.get)
            tol = attention_tolerance(kw["seq"], kw["heads"], kw["kv_heads"], n=n)
            assert d[worst] <= tol, (n, rank, kw, worst, d[worst], tol)


def test_the_tolerances_scale_holds_on_one_process():
    import torch
    from labkit.cp.api import reference
    from labkit.cp.parity import qkv
    # attention_parity's shapes (head_dim 8), then Ulysses' (labkit.cp.ulysses.by_degree)
    for seq, heads, kv, d in [s + (8,) for s in SHAPES] + [(32, 8, 4, 16), (64, 8, 4, 16)]:
        for causal in (False, True):
            full = [t.clone().requires_grad_() for t in qkv(2, heads, kv, seq, d)]
            ref = reference(*full, causal=causal)
            dout = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
            ref.backward(dout)
            q, k = full[0].detach(), full[1].detach().repeat_interleave(heads // (kv or heads), dim=1)
            terms = q.abs() @ k.abs().transpose(-1, -2) / d ** 0.5      # the scores' term sizes
            values = [ref, dout, terms] + [t.grad for t in full]
            assert max(v.abs().max().item() for v in values) <= SCALE


def test_bytes_on_the_wire_equal_the_formula(cluster3):
    """Measured by the kernel: payload + gloo's 96 B per message sent + 48 B per message received."""
    for method in ("ring", "allgather"):
        for rank, r in enumerate(cluster3.run(attention_traffic, seq=29, method=method,
                                              layout="zigzag", kv_heads=2)):
            for phase in ("forward", "backward"):
                assert r[phase] == r["formula"][phase]["on the wire"], (method, rank, phase, r)


def test_computed_scores_follow_the_layout(cluster4):
    s = 64
    for layout in L.LAYOUTS:
        got = [r["score entries"] for r in cluster4.run(attention_work, seq=s, layout=layout, repeats=1)]
        assert got == [L.scores_computed(s, 4, r, layout) for r in range(4)], (layout, got)


def _largest(cases):
    from labkit.cp.runs import largest_scores
    return [largest_scores(seq=48, heads=1, **kw) for kw in cases]


def test_largest_score_block_follows_method_and_layout(cluster4):
    """The largest block one attend call holds, the maximum over ranks, against the formula:
    zig-zag halves the query chunk (s/(2N) x s for all-gather, (s/(2N))^2 for the ring)."""
    from labkit.cp import formulas as F
    cases = [dict(method=m, layout=lay, causal=c) for m in F.METHODS for lay in L.LAYOUTS
             for c in (False, True)]
    per_rank = cluster4.run(_largest, cases)
    for i, kw in enumerate(cases):
        got = max(r[i] for r in per_rank)
        assert got == F.score_entries(48, 4, heads=1, **kw), (kw, [r[i] for r in per_rank])


def _bad(case):
    import torch.distributed as dist
    from labkit.cp import attention
    from labkit.cp.parity import qkv
    r = dist.get_rank()
    q, k, v = (t[:, :, r * 2:r * 2 + 2] for t in qkv(seq=8))
    try:
        if case == "mask":
            attention(q, k, v, attn_mask=q.new_ones(2, 2))
        elif case == "heads":
            attention(q[:, : (2 if r == 1 else 4)], k[:, : (2 if r == 1 else 4)], v[:, : (2 if r == 1 else 4)])
        elif case == "short":
            attention(q[:, :, :1], k[:, :, :1], v[:, :, :1], layout="zigzag")
        elif case == "uneven":
            n = 1 if r == 0 else 2
            attention(q[:, :, :n], k[:, :, :n], v[:, :, :n])
    except ValueError as exc:
        return str(exc)
    return "no error"


def test_bad_input_same_clear_error_on_every_rank(cluster2):
    msgs = cluster2.run(_bad, "mask")
    assert "rank 0: context-parallel attention takes causal=True or causal=False, not an attn_mask" in msgs[0]
    msgs = cluster2.run(_bad, "heads")
    assert msgs[0] == msgs[1] and "rank 1 has query heads = 2 but rank 0 has 4" in msgs[0]
    msgs = cluster2.run(_bad, "short")
    assert msgs[0] == msgs[1].replace("rank 1", "rank 0") and \
        "a sequence of 2 positions cannot be split into the 4 chunks the zigzag layout needs on 2 ranks" in msgs[0]
    msgs = cluster2.run(_bad, "uneven")
    assert msgs[0] == msgs[1] and "rank 0 holds 1 positions but the contiguous layout of 3 positions " \
        "on 2 ranks gives it 2: split the sequence with labkit.cp.shard_sequence" in msgs[0]


def test_saved_for_backward_equals_the_formula(cluster2):
    """Ring keeps its own K/V block; all-gather keeps every block; neither keeps scores."""
    from labkit.cp.parity import saved_for_backward
    for method in ("ring", "allgather"):
        for rank, r in enumerate(cluster2.run(saved_for_backward, seq=61, method=method,
                                              layout="zigzag", kv_heads=2)):
            assert r["measured"] == r["formula"], (method, rank, r)


def test_training_step_under_cp_equals_one_process_only_with_the_cp_reduction(cluster4):
    """One step of one block on 4 CP ranks (zig-zag, ring, causal): the weight gradients summed
    over the CP group equal one process's; without that sum, or with the labels sharded in
    another permutation than the tokens, they do not."""
    from labkit.cp.train import cp_step_parity, tolerance, worst
    good = cluster4.run(cp_step_parity)
    tol, loss_tol = tolerance(good), tolerance(good, params=False)      # derived: labkit.cp.train
    assert worst(good) <= tol and worst(good, params=False) <= loss_tol, \
        (worst(good), tol, worst(good, params=False), loss_tol)
    assert worst(cluster4.run(cp_step_parity, cp_reduce=False)) > 100 * tol
    assert worst(cluster4.run(cp_step_parity, labels_layout="contiguous")) > 100 * tol


def test_ulysses_equals_one_process_and_its_bytes_the_formula(cluster4):
    """Two all-to-alls; rank 0's forward bytes on 2 and 4 ranks with s = 16 N: Ulysses grows by
    (N-1)/N only (x 1.5), the ring with s (x 3)."""
    rows = cluster4.run(_ulysses_rows)[0]
    for r in rows:
        assert r["ulysses"] == r["ulysses formula"] and r["ring"] == r["ring formula"], r
        assert r["max diff"] <= ulysses_tolerance(r["seq"]), (r, ulysses_tolerance(r["seq"]))
    two, four = rows
    pay = lambda r, k, m: r[k] - 144 * m                  # noqa: E731 - payload: headers off
    assert pay(four, "ulysses", 6) * 2 == pay(two, "ulysses", 2) * 3
    assert pay(four, "ring", 3) == 3 * pay(two, "ring", 1)


def _ulysses_rows():
    from labkit.cp.ulysses import by_degree
    return by_degree()


def _ulysses_bad_degree():
    from labkit.cp.ulysses import ulysses_attention
    from labkit.cp.parity import qkv
    q, k, v = (t[:, :, :4] for t in qkv(1, 4, 2, 16, 8))
    try:
        ulysses_attention(q, k, v)
    except ValueError as exc:
        return str(exc)
    return "no error"


def test_ulysses_refuses_more_ranks_than_kv_heads(cluster4):
    for rank, msg in enumerate(cluster4.run(_ulysses_bad_degree)):
        assert f"Ulysses on rank {rank}: 4 ranks must divide the 4 query heads and the 2 K/V heads" in msg
