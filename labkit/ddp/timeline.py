"""One DDP step per rank as a timeline: backward compute and each bucket's all-reduce (layer 4).

The notes: "反向算完一层就立刻启动该层梯度的 AllReduce, 通信与下一层的反向计算重叠", and on
`bucket_cap_mb`: "桶太大 → 首个桶通信启动晚，重叠少; 桶太小 → 通信次数多，启动开销占比高".
`traced_step` runs a few steps of `BucketedDDP` on TinyGPT and records, for the last one,
real times (time.perf_counter, one clock for every process on the machine): forward,
backward, when each gradient was ready, when each bucket's all-reduce was launched and when
it completed (a callback on its future). `overlap_fraction` is the share of communication
time that ran while backward was still computing.
"""
import time

from labkit.models import GPTConfig

# A course-sized model for timing on CPU: 13.8 M parameters, 55 MB of fp32 gradients.
BENCH_GPT = GPTConfig(vocab_size=8192, block_size=64, n_layer=6, n_head=6, n_embd=384)


def union_length(intervals) -> float:
    """Total length covered by (start, end) intervals (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def overlap_fraction(backward: tuple, comms: list) -> float:
    """Share of communication time (union of all-reduce intervals) inside backward [b0, b1]."""
    b0, b1 = backward
    busy = union_length(comms)
    inside = union_length([(max(a, b0), min(b, b1)) for a, b in comms if min(b, b1) > max(a, b0)])
    return inside / busy if busy > 0 else 0.0


def traced_step(bucket_cap_mb: float = 25.0, cfg: GPTConfig = BENCH_GPT, batch: int = 2,
                seq: int = 64, warmup: int = 2) -> dict:
    """On every rank: `warmup` steps of BucketedDDP(TinyGPT), then one recorded step. Every
    bucket is `bucket_cap_mb` (no small first bucket), to show the cap's effect alone.

    Returns times in seconds on the machine's monotonic clock: forward (start, end), backward
    (start, end), synced (when sync_gradients returned), grads [(name, t)], buckets
    [(index, launched, completed, bytes)], and the overlap fraction."""
    import torch
    import torch.distributed as dist
    from labkit.ddp.data_parallel import BucketedDDP
    from labkit.models import TinyGPT, lm_loss, token_batch
    torch.manual_seed(0)
    ddp = BucketedDDP(TinyGPT(cfg), bucket_cap_mb=bucket_cap_mb, first_bucket_cap_mb=None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = token_batch(batch, seq, cfg.vocab_size, seed=dist.get_rank())
    for step in range(warmup + 1):
        if step == warmup:
            ddp.trace = []
        dist.barrier()
        t0 = time.perf_counter()
        loss = lm_loss(ddp(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        ddp.sync_gradients()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
    grads = [(name, t) for kind, name, t, *_ in ddp.trace if kind == "grad"]
    buckets = [(i, a, b, nbytes) for kind, i, a, b, nbytes in
               (r for r in ddp.trace if r[0] == "bucket")]
    # backward compute ends when the last gradient is ready (hooks run inside backward)
    bwd = (t1, max([t for _, t in grads] + [t1]))
    return {"rank": dist.get_rank(), "bucket_cap_mb": bucket_cap_mb, "forward": (t0, t1),
            "backward": bwd, "backward_returned": t2, "synced": t3, "grads": grads,
            "buckets": buckets, "overlap": overlap_fraction(bwd, [(a, b) for _, a, b, _ in buckets]),
            "step": t3 - t0}


def plot_timelines(runs: dict, path: str = None):
    """runs: {label: [traced_step result by rank]}; one panel per label, one row per rank."""
    import matplotlib.pyplot as plt
    height = sum(1.2 + 0.6 * len(r) for r in runs.values())
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, height), squeeze=False)
    for ax, (label, ranks) in zip(axes[:, 0], runs.items()):
        t0 = min(r["forward"][0] for r in ranks)
        ms = lambda t: (t - t0) * 1e3           # noqa: E731 - ms since the first rank started
        for r in ranks:
            y = r["rank"]
            f0, f1 = r["forward"]
            b0, b1 = r["backward"]
            ax.broken_barh([(ms(f0), ms(f1) - ms(f0))], (y + 0.55, 0.35), color="#c7e9c0")
            ax.broken_barh([(ms(b0), ms(b1) - ms(b0))], (y + 0.55, 0.35), color="#31a354")
            palette = [plt.get_cmap("tab20")(i) for i in range(20) if i not in (4, 5)]  # no greens
            prev = float("-inf")
            for i, a, b, _ in r["buckets"]:
                # all-reduces complete in launch order: a bar runs from launch (or the previous
                # completion) to completion; a tick marks the launch
                start = max(a, prev)
                ax.broken_barh([(ms(start), max(ms(b) - ms(start), 0.05))], (y + 0.1, 0.35),
                               color=palette[i % len(palette)], edgecolor="k", linewidth=0.3)
                ax.plot([ms(a)] * 2, [y + 0.05, y + 0.12], color="k", lw=0.6)
                prev = max(prev, b)
            ax.plot([ms(r["synced"])] * 2, [y + 0.05, y + 0.95], "k:", lw=1)
            ax.text(ms(r["synced"]), y + 0.5, f" overlap {r['overlap']:.0%}", va="center", fontsize=8)
        n = len(r["buckets"])
        mean = sum(r["overlap"] for r in ranks) / len(ranks)
        ax.set_title(f"{label}: {n} bucket{'s' * (n != 1)}, mean overlap {mean:.0%} "
                     f"(forward light green, backward green; below: each bucket's all-reduce, ticks at launch)",
                     fontsize=9)
        ax.set_yticks([r["rank"] + 0.5 for r in ranks], [f"rank {r['rank']}" for r in ranks])
        ax.set_ylim(0, len(ranks))
        ax.set_xlabel("ms since the step started")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig
