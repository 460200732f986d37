"""Tensor parallelism's vocabulary and K/V layers on gloo ranks against one device."""
import pytest

from labkit.tp.gqa import GQA_SCALE, gqa_tolerance, kv_heads_of_rank
from labkit.tp.parity import SCALE
from labkit.tp.vocab import logits_bytes
from labkit.tp.parity import loss_tolerance, vocab_tolerance

# derived (labkit.tp.parity and labkit.tp.gqa say how): 2.0e-3 for the LM, 8.8e-3 and
# 6.1e-4 for the two loss checks, 1.8e-3 for GQA; observed below 1e-6


def test_the_tolerances_scales_hold_on_one_process():
    import torch
    from labkit.tp.gqa import GQAttention
    from labkit.tp.parity import _reference, reference_lm, tokens
    ref = reference_lm()
    loss, logits = _reference(ref, *tokens())
    assert max(v.abs().max().item() for v in [loss, logits] + [p.grad for p in ref.parameters()]) <= SCALE
    for seed, shape in ((3, (512, 4096)), (4, (64, 256))):       # vocab_memory's, torch_loss_parallel's
        g = torch.Generator().manual_seed(seed)
        full = torch.randn(*shape, generator=g)
        assert full.abs().max().item() <= SCALE and torch.logsumexp(full, 1).max().item() <= SCALE
    for kv in (1, 2):                                            # gqa_parity's model and batch
        torch.manual_seed(0)
        attn = GQAttention(64, 8, kv)
        g = torch.Generator().manual_seed(1)
        x, w = torch.randn(2, 8, 64, generator=g).requires_grad_(), torch.randn(2, 8, 64, generator=g)
        y = attn(x)
        (y * w).sum().backward()
        assert max(v.abs().max().item() for v in [y, x.grad] + [p.grad for p in attn.parameters()]) <= GQA_SCALE


def test_kv_heads_per_rank_pure():
    assert [list(kv_heads_of_rank(8, 2, 4, r)) for r in range(4)] == [[0], [0], [1], [1]]
    assert [list(kv_heads_of_rank(8, 4, 2, r)) for r in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match=r"TP degree \(4\) exceeds the K/V heads \(3\)"):
        kv_heads_of_rank(12, 3, 4, 0)
    b = logits_bytes(4096, 128256, 8)
    assert b["one device"]["logits"] == 4096 * 128256 * 4 and b["loss parallel"]["logits"] * 8 == b["one device"]["logits"]


@pytest.mark.cluster
def test_vocab_parallel_embedding_and_loss_match_one_device(cluster):
    from labkit.tp.parity import vocab_parity
    for rank, diffs in enumerate(cluster.run(vocab_parity)):
        rows = diffs.pop("vocab rows")
        assert rows[1] - rows[0] == 64 // cluster.world_size
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] <= vocab_tolerance(), (rank, worst, diffs[worst], vocab_tolerance())
    assert {"loss", "embedding grad", "head grad", "block.attn.qkv.weight"} <= set(diffs)


@pytest.mark.cluster
def test_loss_parallel_keeps_one_t_of_the_logits(cluster):
    from labkit.tp.split import vocab_memory
    t, n, v = cluster.world_size, 512, 4096
    want = logits_bytes(n, v, t)
    for rank, res in enumerate(cluster.run(vocab_memory, tokens_=n, vocab=v)):
        tol = loss_tolerance(n, v)
        assert res["diff loss parallel"] <= tol and res["diff gathered"] <= tol, (res, tol)
        for way in want:           # logits: exact; saved: the logit-sized tensor + ids and masks
            assert res[way]["logits"] == want[way]["logits"], (rank, way, res[way])
            extra = res[way]["saved by the loss"] - want[way]["saved by the loss"]
            assert 0 <= extra <= n * (8 + 1) + 16, (rank, way, res[way], want[way])


@pytest.mark.cluster
def test_torch_loss_parallel_beside_labkit(cluster2):
    from labkit.tp.parity import torch_loss_parallel
    for res in cluster2.run(torch_loss_parallel):
        assert res.pop("torch collectives") == {"all_reduce": 3}, res
        assert max(res.values()) <= loss_tolerance(64, 256), res      # its tokens_, vocab


@pytest.mark.cluster
def test_gqa_with_more_ranks_than_kv_heads(cluster4):
    from labkit.tp.gqa import gqa_parity
    for kv in (1, 2):                 # 4 and 2 replicas of each K/V head
        for rank, r in enumerate(cluster4.run(gqa_parity, n_kv_head=kv)):
            assert r["replicas"] == 4 // kv and r["sync all-reduces"] == 2, r
            worst = max((k for k in r if k.endswith("grad") or k == "output"), key=r.get)
            tol = gqa_tolerance(n_kv_head=kv)
            assert r[worst] <= tol, (kv, rank, worst, r[worst], tol)
        for r in cluster4.run(gqa_parity, n_kv_head=kv, sync=False):   # replicas not summed
            assert r["q grad"] <= tol and min(r["k grad"], r["v grad"]) > 10 * tol, (r, tol)
