"""Tensor parallelism's vocabulary and K/V layers on gloo ranks against one device."""
import pytest

from labkit.tp.gqa import kv_heads_of_rank
from labkit.tp.vocab import logits_bytes

TOL = 1e-5


def test_kv_heads_per_rank_pure():
    assert [list(kv_heads_of_rank(8, 2, 4, r)) for r in range(4)] == [[0], [0], [1], [1]]
    assert [list(kv_heads_of_rank(8, 4, 2, r)) for r in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match=r"TP degree \(4\) exceeds the K/V heads \(3\)"):
        kv_heads_of_rank(12, 3, 4, 0)
    b = logits_bytes(4096, 128256, 8)
    assert b["one device"]["logits"] == 4096 * 128256 * 4 and b["loss parallel"]["logits"] * 8 == b["one device"]["logits"]


@pytest.mark.cluster
def test_vocab_parallel_embedding_and_loss_match_one_device(cluster):
    from labkit.tp.vocab_parity import vocab_parity
    for rank, diffs in enumerate(cluster.run(vocab_parity)):
        rows = diffs.pop("vocab rows")
        assert rows[1] - rows[0] == 64 // cluster.world_size
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] < TOL, (rank, worst, diffs[worst])
    assert {"loss", "embedding grad", "head grad", "block.attn.qkv.weight"} <= set(diffs)


@pytest.mark.cluster
def test_loss_parallel_keeps_one_t_of_the_logits(cluster):
    from labkit.tp.vocab_parity import vocab_memory
    t, n, v = cluster.world_size, 512, 4096
    want = logits_bytes(n, v, t)
    for rank, res in enumerate(cluster.run(vocab_memory, tokens_=n, vocab=v)):
        assert res["diff loss parallel"] < TOL and res["diff gathered"] < TOL, res
        for way in want:           # logits: exact; saved: the logit-sized tensor + ids and masks
            assert res[way]["logits"] == want[way]["logits"], (rank, way, res[way])
            extra = res[way]["saved by the loss"] - want[way]["saved by the loss"]
            assert 0 <= extra <= n * (8 + 1) + 16, (rank, way, res[way], want[way])


@pytest.mark.cluster
def test_torch_loss_parallel_beside_labkit(cluster2):
    from labkit.tp.vocab_parity import torch_loss_parallel
    for res in cluster2.run(torch_loss_parallel):
        assert res.pop("torch collectives") == {"all_reduce": 3}, res
        assert max(res.values()) < TOL, res


@pytest.mark.cluster
def test_gqa_with_more_ranks_than_kv_heads(cluster4):
    from labkit.tp.gqa import gqa_parity
    for kv in (1, 2):                 # 4 and 2 replicas of each K/V head
        for rank, r in enumerate(cluster4.run(gqa_parity, n_kv_head=kv)):
            assert r["replicas"] == 4 // kv and r["sync all-reduces"] == 2, r
            worst = max((k for k in r if k.endswith("grad") or k == "output"), key=r.get)
            assert r[worst] < TOL, (kv, rank, worst, r[worst])
        for r in cluster4.run(gqa_parity, n_kv_head=kv, sync=False):   # replicas not summed
            assert r["q grad"] < TOL and min(r["k grad"], r["v grad"]) > 1e-2, r
