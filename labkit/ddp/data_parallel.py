"""Data parallelism from scratch: naive, flat, bucketed with overlap (layer 3).

The notes' DDP loop: each rank reads its own mini-batch, runs forward and backward locally,
all-reduces the gradients (mean over ranks) and takes the same optimizer step, so the
replicas never drift. Simple next to fast, like picotron's DataParallelNaive/DataParallelBucket:

- `NaiveDDP`: one all-reduce per gradient, after backward.
- `FlatDDP`: one all-reduce over every gradient flattened into one buffer, after backward.
- `BucketedDDP` (bucketed.py): gradients grouped into buckets of `bucket_cap_mb` in reverse
  order of use; a bucket's all-reduce starts (async) as soon as its last gradient is
  accumulated, so it overlaps the rest of backward (Li et al., "PyTorch Distributed", VLDB
  2020, sec. 3.2), with torch DDP's bucket layout, options and behaviour.

All three, and gradient accumulation without sync on all micro-batches but the last:

    ddp = BucketedDDP(model)                 # broadcasts rank 0's parameters and buffers
    with ddp.no_sync():                      # micro-batches 1..k-1: gradients stay local
        loss_fn(ddp(x1), y1).backward()
    loss_fn(ddp(xk), yk).backward()          # last micro-batch: gradients are synchronised
    ddp.sync_gradients()                     # naive/flat: communicate now; bucketed: wait
    opt.step(); opt.zero_grad()

As torch's DDP: every forward first broadcasts rank 0's buffers (`broadcast_buffers=True`),
and a parameter that no rank used keeps `.grad` None, so that an optimizer skips it (AdamW's
weight decay would otherwise move it); one used on some ranks only gets zeros from the others.
"""
import torch
import torch.distributed as dist

from labkit.ddp.base import MB, _DataParallel, trainable  # noqa: F401 - MB, trainable: public here too
from labkit.ddp.bucketed import BucketedDDP


class NaiveDDP(_DataParallel):
    """One blocking all-reduce per parameter after backward, then divide by the world size.
    First one small all-reduce of which parameters have a gradient on each rank: a parameter
    that no rank used is skipped (its .grad stays None); one used elsewhere sends zeros."""

    def sync_gradients(self) -> None:
        if not self.require_sync:
            return
        used = torch.tensor([p.grad is not None for _, p in self.named], dtype=torch.int32,
                            device=self.named[0][1].device if self.named else None)  # NCCL: on the GPU
        dist.all_reduce(used, group=self.group)
        for (_, p), anyone in zip(self.named, used.tolist()):
            if not anyone:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=self.group)
            p.grad.div_(self.world)


class FlatDDP(_DataParallel):
    """Flatten every gradient into one buffer (one per dtype), one all-reduce, copy back.
    The buffer ends with one flag per parameter (1 where this rank has its gradient), so the
    same all-reduce also says which parameters no rank used: those keep .grad None."""

    def sync_gradients(self) -> None:
        if not self.require_sync:
            return
        by_dtype = {}
        for _, p in self.named:
            by_dtype.setdefault(p.dtype, []).append(p)
        for params in by_dtype.values():
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                              for p in params] +                       # one copy in
                             [torch.tensor([float(p.grad is not None) for p in params],
                                           dtype=params[0].dtype, device=params[0].device)])
            dist.all_reduce(flat, group=self.group)
            flat.div_(self.world)
            *pieces, used = flat.split([p.numel() for p in params] + [len(params)])
            for p, piece, anyone in zip(params, pieces, used.tolist()):
                if not anyone:
                    continue                                           # no rank used it
                if p.grad is None:
                    p.grad = piece.view_as(p).clone()
                else:
                    p.grad.copy_(piece.view_as(p))                     # one copy out


STRATEGIES = {"naive": NaiveDDP, "flat": FlatDDP, "bucketed": BucketedDDP}
