"""The rest of the DDP section: DistributedSampler shards and the validation padding skew,
learning-rate scaling rules, the torchrun example, and the benchmark's measurements."""
import math
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from labkit.ddp import lr_scaling, sampler
from labkit.ddp.benchmark import bench_ranks, combine, summary, table
from labkit.toy_models import AwkwardNet, GPTConfig, TinyGPT, awkward_batch
from labkit.numerics import chain_bound

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_shards_are_disjoint_and_cover_when_the_data_divides(cluster):
    n = cluster.world_size
    shards = cluster.run(sampler.shard, 12)
    rep = sampler.shard_report(shards, 12)
    assert rep == {"per_rank": [12 // n] * n, "overlap": [], "missing": [], "duplicated": []}
    again = cluster.run(sampler.shard, 12)
    other_epoch = cluster.run(sampler.shard, 12, epoch=1)
    assert again == shards                                   # same epoch: same order
    assert other_epoch != shards                             # set_epoch reshuffles
    assert sampler.shard_report(other_epoch, 12)["overlap"] == []


def test_padding_duplicates_skew_the_validation_metric(cluster4):
    shards = cluster4.run(sampler.shard, 10, shuffle=False)
    assert shards == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]   # 0 and 1 padded in again
    assert sampler.shard_report(shards, 10)["duplicated"] == [0, 1]
    r = cluster4.run(sampler.validation_loss, 10)[0]
    assert r["evaluated"] == 12 and r["n_items"] == 10
    # derived (labkit.numerics.chain_bound): the ranks run AwkwardNet on 3 rows where one process
    # runs 10 (kernels block the sums otherwise), then sum per rank and all-reduce where one
    # process takes one mean: a chain of reductions of lengths 2 (embed + frozen), 14 (fc1 +
    # bias), 20 (fc2 + bias), 1 (residual), 13 (head), 38 (log-sum-exp over 37 and the target), 7
    # (mean over 6 tokens), 11 (mean over 10 samples); scale 40 >= the largest sum of a dot
    # product's term magnitudes (the head's, 33: checked below on one process). 5.1e-4; measured
    # 4e-7. The padding skew it must still catch is 0.2 (400x the bound).
    bound = chain_bound([2, 14, 20, 1, 13, 38, 7, 11], 40.0)
    assert abs(r["masked"] - r["one_process"]) <= bound, (r, bound)
    assert abs(r["padded"] - r["one_process"]) > 100 * bound, (r, bound)
    torch.manual_seed(0)                                      # validation_loss's model and data
    model = AwkwardNet().eval()
    x, _ = awkward_batch(10, seed=7)
    with torch.no_grad():
        e = model.embed(x) + model.frozen
        res = e + model.fc2(torch.tanh(model.fc1(e)))
        terms = res.abs() @ model.head.weight.abs().T          # sum of |w_i x_i| per logit
    assert terms.max().item() <= 40.0, terms.max()


def test_lr_scaling_rules():
    assert lr_scaling.scaled_lr(0.1, 32, 256, "linear") == pytest.approx(0.8)
    assert lr_scaling.scaled_lr(0.1, 32, 128, "sqrt") == pytest.approx(0.2)
    assert lr_scaling.scaled_lr(0.1, 32, 256, "none") == 0.1
    with pytest.raises(ValueError, match="rule must be one of"):
        lr_scaling.scaled_lr(0.1, 32, 64, "cubic")


def test_linear_scaling_keeps_up_with_the_small_batch(cluster4):
    final = {}
    for rule in lr_scaling.RULES:
        r = cluster4.run(lr_scaling.lr_rule_run, rule, samples=512)[0]
        assert r["ddp"][-1][0] == r["base"][-1][0] == 512      # same samples seen
        final[rule] = r["ddp"][-1][1]
        base = r["base"][-1][1]
    assert final["linear"] < final["sqrt"] < final["none"]
    assert math.isclose(final["linear"], base, rel_tol=0.5)


def test_notes_minimal_example_under_torchrun():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", "examples/ddp_minimal.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[:4000]
    assert "epoch 2: mean loss" in p.stdout
    assert "replicas_in_sync: pass (28 parameters bit-identical on 2 ranks)" in p.stdout


def test_bench_measures_bytes_and_bucket_memory(cluster2):
    cfg = GPTConfig(vocab_size=512, block_size=32, n_layer=2, n_head=2, n_embd=64)
    groups = [[("labkit bucketed", "bucketed", 1, False), ("torch", "torch", 1, False),
               ("labkit bucketed view", "bucketed", 1, True), ("torch view", "torch", 1, True)],
              [("labkit flat", "flat", None, False)]]
    res = combine(cluster2.run(bench_ranks, groups, cfg, batch=2, seq=32, steps=2, warmup=1))
    grad = res["torch"]["grad_bytes"]
    assert grad == 4 * TinyGPT(cfg).num_params()
    for label, r in res.items():
        ring = 2 * (2 - 1) / 2 * grad
        assert 1.0 <= r["sent"] / ring < 1.05, (label, r["sent"], ring)   # + gloo headers
        assert r["median"] > 0 and len(r["times"]) == 2
    assert res["torch"]["memory"] == 2 * grad                # grads + a copy in the buckets
    assert res["torch view"]["memory"] == grad               # grads are views of the buckets
    assert res["labkit bucketed"]["memory"] == 2 * grad
    assert res["labkit bucketed view"]["memory"] == grad     # .grad are views of the buckets
    assert res["labkit flat"]["memory"] == grad              # its flat buffer is freed after sync
    text = table(res, 2) + "\n" + summary(res)
    assert "| labkit flat |" in text and "| torch view |" in text
    assert "bucket_cap_mb=1: labkit bucketed / torch DDP step time = " in text
    assert "bucket_cap_mb=1, gradient_as_bucket_view: labkit bucketed / torch DDP step time = " in text
