"""The DDP benchmark: step time, bytes on the wire and gradient memory of each DDP variant
(layer 4: `bench_ranks` runs in a rank; `combine`, `table`, `summary` in the notebook or the
CLI `python -m labkit.bench ddp`).

Every configuration trains a fresh TinyGPT (same seed) with one wrapper: labkit's naive,
flat or bucketed DDP, or torch's DistributedDataParallel, each bucketed one with a
bucket_cap_mb and gradient_as_bucket_view. Configurations compared with each other live together and step in
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

from labkit.comm.formulas import ring_bytes_per_rank
from labkit.ddp.data_parallel import STRATEGIES, trainable
from labkit.ddp.timeline import BENCH_GPT
from labkit.i18n import N_, tr

# (label, kind, bucket_cap_mb, gradient_as_bucket_view). The configurations of a group live
# together and take their steps in turn (A B C A B C ...), so a change in the machine's load
# hits each alike; ratios are taken inside a group.
GROUPS = [[("labkit naive", "naive", None, False), ("labkit flat", "flat", None, False),
           ("labkit bucketed 25 MB", "bucketed", 25, False), ("torch DDP 25 MB", "torch", 25, False),
           ("labkit bucketed 25 MB view", "bucketed", 25, True),
           ("torch DDP 25 MB view", "torch", 25, True)]] + \
    [[(f"labkit bucketed {c} MB", "bucketed", c, False), (f"torch DDP {c} MB", "torch", c, False),
      (f"labkit bucketed {c} MB view", "bucketed", c, True), (f"torch DDP {c} MB view", "torch", c, True)]
     for c in (1, 5, 100)]


def wrap(kind: str, model, cap=None, view=False):
    """(module to call, function to call after backward) for one configuration."""
    if kind == "torch":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, bucket_cap_mb=cap, gradient_as_bucket_view=view), lambda: None
    w = STRATEGIES[kind](model, bucket_cap_mb=cap, gradient_as_bucket_view=view) \
        if kind == "bucketed" else STRATEGIES[kind](model)
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
    from labkit.toy_models import TinyGPT
    torch.manual_seed(0)
    return TinyGPT(cfg)


def grad_memory(kind: str, cap=None, view=False, cfg=BENCH_GPT, batch=2, seq=64) -> int:
    """Bytes of gradient and bucket storages after the second step's all-reduce."""
    from labkit.toy_models import lm_loss, token_batch
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
    from labkit.toy_models import lm_loss, token_batch
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
                t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=x.device)
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


def combine(per_rank: list) -> dict:
    """bench_ranks' results by rank -> one dict: times are already the slowest rank's (the same
    on every rank); bytes are averaged over ranks."""
    out = per_rank[0]
    for lbl in out:
        for key in ("sent", "received"):
            out[lbl][key] = sum(r[lbl][key] for r in per_rank) / len(per_rank)
    return out


def paired_ratio(a: dict, b: dict) -> float:
    """Median over rounds of a's step time / b's in the same round (they ran back to back, so a
    load change on the machine mostly cancels out)."""
    return statistics.median(x / y for x, y in zip(a["times"], b["times"]))


def torch_twin(res: dict, r: dict):
    """torch DDP at r's bucket cap and gradient_as_bucket_view, in r's group (stepped in turn)."""
    for t in res.values():
        if t["group"] == r["group"] and t["config"] == ("torch", *r["config"][1:]):
            return t
    return None


def table(res: dict, n: int) -> str:
    """The results as a Markdown table (display it with IPython.display.Markdown)."""
    grad = next(iter(res.values()))["grad_bytes"]
    ring = ring_bytes_per_rank(grad, n)
    head = [N_("variant"), N_("step ms"), N_("vs torch DDP, same cap and view"), N_("sent MB/step"), N_("sent/formula"),
            N_("grad+bucket MB"), N_("/ gradient")]
    rows = [tr("Gradient {grad:.1f} MB; ring all-reduce formula 2(N-1)/N x gradient = {ring:.1f} MB per "
               "rank per step (N={n}).", grad=grad / 1e6, ring=ring / 1e6, n=n), "",
            "| " + " | ".join(tr(h) for h in head) + " |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for lbl, r in res.items():
        twin = torch_twin(res, r) if r["config"][0] == "bucketed" else None
        vs = f"{paired_ratio(r, twin):.2f}x" if twin is not None else ""
        mem = r.get("memory")
        rows.append(f"| {lbl} | {r['median'] * 1e3:.1f} | {vs} | {r['sent'] / 1e6:.1f} | "
                    f"{r['sent'] / ring:.3f} | " +
                    (f"{mem / 1e6:.1f} | {mem / grad:.2f} |" if mem is not None else " | |"))
    rows += ["", tr("Step ms: median of the slowest rank's step. Ratios: median over rounds of the "
                    "ratio of steps taken back to back.")]
    return "\n".join(rows)


KINDS = {"flat": N_("flat"), "bucketed": N_("bucketed")}     # a labkit variant's name in a summary line


def summary(res: dict) -> str:
    """Paired step-time ratios inside one group, one line each."""
    lines = []
    for lbl, r in res.items():
        kind, cap, view = r["config"]
        twin = torch_twin(res, r)
        if kind == "bucketed" and twin is not None:
            lines.append(tr("bucket_cap_mb={cap}{view}: labkit bucketed / torch DDP step time = {ratio:.2f}",
                            cap=cap, view=", gradient_as_bucket_view" if view else "",
                            ratio=paired_ratio(r, twin)))
        if kind == "naive":
            for t in res.values():
                if t["group"] == r["group"] and t["config"][0] in ("flat", "bucketed") and not t["config"][2]:
                    other = KINDS[t["config"][0]]
                    lines.append(tr("labkit naive / {other}{cap} step time = {ratio:.2f}", other=tr(other),
                                    cap=" %g MB" % t["config"][1] if t["config"][1] else "",
                                    ratio=paired_ratio(r, t)))
    return "\n".join(lines)
