"""Step time, bytes on the wire and gradient memory of each DDP variant (layer 4, in a rank).

Every configuration trains a fresh TinyGPT (same seed) with one wrapper: labkit's naive,
flat or bucketed DDP, or torch's DistributedDataParallel with a bucket_cap_mb and
gradient_as_bucket_view. Configurations compared with each other live together and step in
turn, so that a load change on the machine hits them all alike; a step's time is the slowest
rank's.

- bytes: `labkit.comm.traffic.measure()` around one step (the kernel's TCP counters on the
  process-group sockets, gloo's headers included), against the ring's 2(N-1)/N x gradient.
- memory: the distinct tensor storages holding gradients and buckets after the all-reduce,
  counted exactly by data pointer (torch's buckets are reached through a comm hook that
  records `bucket.buffer()` and then runs the default all-reduce).
"""
import statistics
import time

import torch
import torch.distributed as dist

from labkit.ddp.data_parallel import STRATEGIES, trainable
from labkit.ddp.timeline import BENCH_GPT

# (label, kind, bucket_cap_mb, gradient_as_bucket_view). The configurations of a group live
# together and take their steps in turn (A B C A B C ...), so a change in the machine's load
# hits each alike; ratios are taken inside a group.
GROUPS = [[("labkit naive", "naive", None, False), ("labkit flat", "flat", None, False),
           ("labkit bucketed 25 MB", "bucketed", 25, False), ("torch DDP 25 MB", "torch", 25, False),
           ("torch DDP 25 MB view", "torch", 25, True)]] + \
    [[(f"labkit bucketed {c} MB", "bucketed", c, False), (f"torch DDP {c} MB", "torch", c, False),
      (f"torch DDP {c} MB view", "torch", c, True)] for c in (1, 5, 100)]


def wrap(kind: str, model, cap=None, view=False):
    """(module to call, function to call after backward) for one configuration."""
    if kind == "torch":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, bucket_cap_mb=cap, gradient_as_bucket_view=view), lambda: None
    w = STRATEGIES[kind](model, bucket_cap_mb=cap) if kind == "bucketed" else STRATEGIES[kind](model)
    return w, w.sync_gradients


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one buffer counted once)."""
    seen = {}
    for t in tensors:
        if t is not None:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def _fresh(cfg):
    from labkit.models import TinyGPT
    torch.manual_seed(0)
    return TinyGPT(cfg)


def grad_memory(kind: str, cap=None, view=False, cfg=BENCH_GPT, batch=2, seq=64) -> int:
    """Bytes of gradient and bucket storages after the second step's all-reduce."""
    from labkit.models import lm_loss, token_batch
    model, buffers = _fresh(cfg), []
    w, sync = wrap(kind, model, cap, view)
    if kind == "torch":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def recording_hook(state, bucket):
            buffers.append(bucket.buffer())               # the reducer's flat bucket
            return allreduce_hook(None, bucket)
        w.register_comm_hook(None, recording_hook)
    x, y = token_batch(batch, seq, cfg.vocab_size, seed=dist.get_rank())
    for step in range(2):                                 # torch rebuilds buckets after step 1
        buffers.clear()
        lm_loss(w(x), y).backward()
        sync()
        if step == 1:
            if kind == "bucketed":
                buffers = [b.buffer for b in w.buckets]
            grads = [p.grad for _, p in trainable(model)]
            total = storage_bytes(grads + buffers)
        model.zero_grad(set_to_none=True)
    return total


def bench_ranks(groups=GROUPS, cfg=BENCH_GPT, batch: int = 2, seq: int = 64, steps: int = 5,
                warmup: int = 2, memory: bool = True) -> dict:
    """On every rank: {label: {"times": slowest rank's step seconds, "median", "sent": bytes
    this rank sent in one step, "received", "memory": gradient+bucket bytes, "group"}}.
    A label that appears in two groups is measured in each ("label #2" the second time)."""
    from labkit.comm.traffic import measure
    from labkit.models import lm_loss, token_batch
    x, y = token_batch(batch, seq, cfg.vocab_size, seed=dist.get_rank())
    out = {}
    for g, group in enumerate(groups):
        live = []
        for label, kind, cap, view in group:
            model = _fresh(cfg)
            w, sync = wrap(kind, model, cap, view)
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            label = label if label not in out else f"{label} #2"
            out[label] = {"times": [], "group": g, "config": (kind, cap, view)}
            live.append((label, w, sync, opt))

        def step(w, sync, opt):
            lm_loss(w(x), y).backward()
            sync()
            opt.step()
            opt.zero_grad(set_to_none=True)
        for _ in range(warmup):
            for _, *rest in live:
                step(*rest)
        for _ in range(steps):
            for label, *rest in live:
                dist.barrier()
                t0 = time.perf_counter()
                step(*rest)
                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)      # the slowest rank sets the pace
                out[label]["times"].append(t.item())
        for label, *rest in live:
            dist.barrier()
            with measure() as m:
                step(*rest)
                dist.barrier()                                # all traffic of the step has arrived
            out[label]["sent"], out[label]["received"] = m.sent, m.received
        del live, w, model, opt
    grad_bytes = sum(p.numel() * p.element_size() for _, p in trainable(_fresh(cfg)))
    for label, r in out.items():
        r["median"] = statistics.median(r["times"])
        r["grad_bytes"] = grad_bytes
        if memory:
            r["memory"] = grad_memory(*r["config"], cfg=cfg, batch=batch, seq=seq)
    return out
