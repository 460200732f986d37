"""The pitfalls of notebook 11 reproduced on the ranks; each returns what a detector in
`labkit.pitfalls.detectors` judges.

    device_map()                                # on every rank: where its tensors land, and LOCAL_RANK
    illustrated_device_map(4, set_device=False) # {rank: "cuda:0"}: computed, an illustration
    batchnorm_stats(sync=False)                 # on every rank: running statistics after a step
    seed_probe(weights_seed_by_rank=False, ...) # on every rank: hashes of weights, masks, seeds
"""
import hashlib

import torch
import torch.distributed as dist
import torch.nn as nn


def device_map() -> dict:
    """On every rank, measured: {rank: (the device a new tensor lands on, LOCAL_RANK)}. On a GPU
    the device is `cuda:<torch.cuda.current_device()>`: cuda:0 on every rank that never called
    set_device; `pitfalls.devices_distinct` compares it with LOCAL_RANK. On CPU ranks: "cpu"."""
    import labkit
    if torch.cuda.is_available():
        dev = f"cuda:{torch.cuda.current_device()}"
        assert str(torch.empty(1, device="cuda").device) == dev
    else:
        dev = "cpu"
    return {dist.get_rank(): (dev, labkit.local_rank())}


def illustrated_device_map(world_size: int, set_device: bool) -> dict:
    """An illustration, computed and not measured: what `device_map` finds on a node with one
    GPU per rank, with and without `torch.cuda.set_device(local_rank)` ("cuda" means the current
    device, which is 0 until set_device). It cannot fail: it only shows what the detector reads."""
    return {r: f"cuda:{r if set_device else 0}" for r in range(world_size)}


def _hash(t: torch.Tensor) -> int:
    raw = t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True)


class HandSyncBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the global batch: every rank
    all-reduces (count, sum, sum of squares), as SyncBatchNorm does on GPUs (SyncBatchNorm
    raises on CPU tensors). Differentiable: torch.distributed.nn's all_reduce carries gradients."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        import warnings
        from torch.distributed.nn.functional import all_reduce
        stats = torch.cat([x.new_tensor([float(x.shape[0])]), x.sum(0), (x * x).sum(0)])
        with warnings.catch_warnings():   # torch 2.13 marks it deprecated; it still carries gradients
            warnings.simplefilter("ignore", FutureWarning)
            stats = all_reduce(stats)
        c = x.shape[1]
        n, s, sq = stats[0], stats[1:1 + c], stats[1 + c:]
        mean = s / n
        var = sq / n - mean * mean                         # biased: used to normalise
        with torch.no_grad():
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(m * mean)
            self.running_var.mul_(1 - m).add_(m * var * n / (n - 1))   # unbiased, as torch does
            self.num_batches_tracked += 1
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def _bn_batch(rank: int, per_rank: int = 8, features: int = 4):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(per_rank, features, generator=g) * (1 + rank) + rank  # ranks see different data


def batchnorm_stats(sync: bool, per_rank: int = 8, features: int = 4) -> dict:
    """On every rank: one training forward of a BatchNorm layer (plain or hand-synchronised)
    on this rank's batch; returns its running statistics, the output, and one process's
    answer on the global batch (every rank's batch concatenated) for comparison."""
    rank, n = dist.get_rank(), dist.get_world_size()
    bn = (HandSyncBatchNorm1d if sync else nn.BatchNorm1d)(features)
    x = _bn_batch(rank, per_rank, features).requires_grad_()
    out = bn(x)
    out.pow(2).sum().backward()
    ref = nn.BatchNorm1d(features)
    xs = torch.cat([_bn_batch(r, per_rank, features) for r in range(n)]).requires_grad_()
    ref_out = ref(xs)
    ref_out.pow(2).sum().backward()
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    return {"stats": torch.cat([bn.running_mean, bn.running_var]).tolist(),
            "one_process": torch.cat([ref.running_mean, ref.running_var]).tolist(),
            "out_gap": (out - ref_out[mine]).abs().max().item(),
            "grad_gap": (x.grad - xs.grad[mine]).abs().max().item()}


def seed_probe(weights_seed_by_rank: bool = False, sampler_seed_by_rank: bool = False,
               dropout_seed_by_rank: bool = True, tp_replicated_seed_by_rank: bool = False,
               seed: int = 0) -> dict:
    """On every rank: build a small model, a DistributedSampler and one dropout mask with the
    seeds chosen as the flags say; return hashes for `labkit.pitfalls.seeds_ok`.
    "tp_replicated": the mask that this rank, taken as a member of one tensor-parallel group,
    draws on an activation every rank of the group holds in full; Megatron draws it from the
    generator seeded alike on the group, and only a sharded activation's mask from the
    per-rank one (`tp_replicated_seed_by_rank=True` makes the mistake)."""
    from torch.utils.data import DistributedSampler
    rank = dist.get_rank()
    torch.manual_seed(seed + (rank if weights_seed_by_rank else 0))
    model = nn.Linear(8, 8)
    sampler_seed = seed + (rank if sampler_seed_by_rank else 0)
    sampler = DistributedSampler(range(40), seed=sampler_seed)
    torch.manual_seed(seed + 1000 + (rank if dropout_seed_by_rank else 0))   # after the model
    mask = nn.functional.dropout(torch.ones(64), p=0.5) > 0
    replicated = torch.Generator().manual_seed(seed + 2000 + (rank if tp_replicated_seed_by_rank else 0))
    tp_mask = torch.rand(64, generator=replicated) >= 0.5
    return {"weights": _hash(model.weight), "sampler_seed": sampler_seed,
            "indices": list(sampler), "dropout": _hash(mask.to(torch.uint8)),
            "tp_replicated": _hash(tp_mask.to(torch.uint8))}
