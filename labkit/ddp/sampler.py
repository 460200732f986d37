"""DistributedSampler, run on the ranks: shards, epochs, and the validation padding trap.

The notes: "每卡读不同的 mini-batch（DistributedSampler 保证不重叠）" and the pitfall
"DistributedSampler 未设 shuffle=False（验证集）→ 评估结果乱". torch's sampler pads the index
list to a multiple of the world size by repeating its first indices (drop_last=False), so
when the data set does not divide, a few samples are evaluated twice and a metric averaged
over ranks is skewed. Masking the padded positions gives back the one-process number.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from labkit.toy_models import AwkwardNet, awkward_batch


def shard(n_items: int, epoch: int = 0, shuffle: bool = True, drop_last: bool = False,
          seed: int = 0) -> list:
    """This rank's indices of a data set of n_items, from torch's DistributedSampler."""
    s = DistributedSampler(range(n_items), num_replicas=dist.get_world_size(), rank=dist.get_rank(),
                           shuffle=shuffle, seed=seed, drop_last=drop_last)
    s.set_epoch(epoch)                 # the shuffle is seeded by seed + epoch: same on every rank
    return list(s)


def shard_report(shards: list, n_items: int) -> dict:
    """Pure: given every rank's indices, what overlaps, what is missing, what is repeated."""
    seen = [i for s in shards for i in s]
    counts = {i: seen.count(i) for i in set(seen)}
    overlap = sorted({i for a in range(len(shards)) for b in range(a + 1, len(shards))
                      for i in set(shards[a]) & set(shards[b])})
    return {"per_rank": [len(s) for s in shards], "overlap": overlap,
            "missing": sorted(set(range(n_items)) - set(seen)),
            "duplicated": sorted(i for i, c in counts.items() if c > 1)}


def _per_sample_loss(model, x, y) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(dim=1)


@torch.no_grad()
def validation_loss(n_items: int = 10, seed: int = 7) -> dict:
    """Mean per-sample loss of a fixed AwkwardNet over a validation set of n_items, three ways:
    "one_process" (the truth), "padded" (DistributedSampler(shuffle=False) shards, all-reduced
    sum / count: the padding duplicates are counted), "masked" (padded positions dropped)."""
    import labkit
    rank, n, dev = dist.get_rank(), dist.get_world_size(), labkit.device()
    torch.manual_seed(0)
    model = AwkwardNet().eval().to(dev)
    x, y = (t.to(dev) for t in awkward_batch(n_items, seed=seed))
    idx = shard(n_items, shuffle=False)                        # rank r gets r, r+N, r+2N, ...
    losses = _per_sample_loss(model, x[idx], y[idx])
    real = torch.tensor([k * n + rank < n_items for k in range(len(idx))], device=dev)   # padded positions
    s = torch.stack([losses.sum(), torch.tensor(float(len(idx)), device=dev), losses[real].sum(),
                     real.sum().float()]).double()
    dist.all_reduce(s)
    return {"one_process": _per_sample_loss(model, x, y).mean().item(),
            "padded": (s[0] / s[1]).item(), "masked": (s[2] / s[3]).item(),
            "evaluated": int(s[1]), "n_items": n_items, "indices": idx}
