"""One DDP step per rank as a timeline: backward compute and each bucket's all-reduce (layer 4).

The notes: "反向算完一层就立刻启动该层梯度的 AllReduce, 通信与下一层的反向计算重叠", and on
`bucket_cap_mb`: "桶太大 → 首个桶通信启动晚，重叠少; 桶太小 → 通信次数多，启动开销占比高".
`traced_step` runs a few steps of `BucketedDDP` on TinyGPT and records, for the last one,
forward, backward, when each gradient was ready, when each bucket's all-reduce was launched
and when it completed. The stamps come from `labkit.ddp.clock`: host time on CPU ranks (gloo
completes a work when the all-reduce has finished), CUDA events on GPU ranks (NCCL completes
a work's future when the collective is enqueued, so host times would only measure dispatch).

`annotate` (in the notebook, over every rank's record) splits each all-reduce into the time
it waited for the slowest rank to launch it (an all-reduce cannot progress before every
rank has joined) and the time it ran, and gives each rank's overlap: the share of its
running all-reduce time that fell inside its own backward. Waiting is not counted as overlap.
"""

from labkit.toy_models import GPTConfig
from labkit.figtext import figsize as _figsize, size as _fs
from labkit.i18n import tr_fig                 # figure text in the learner's language

# A course-sized model for timing on CPU: 13.8 M parameters, 55 MB of fp32 gradients.
BENCH_GPT = GPTConfig(vocab_size=8192, block_size=64, n_layer=6, n_head=6, n_embd=384)
# The notebook's: 4.2 M parameters, 17 MB of gradients (a step in a fraction of a second).
NOTEBOOK_GPT = GPTConfig(vocab_size=4096, block_size=64, n_layer=4, n_head=4, n_embd=256)


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
    """On every rank: `warmup` steps of BucketedDDP(TinyGPT) (the first rebuilds the buckets),
    then one recorded step. `bucket_cap_mb` is given, so every bucket has that cap (torch adds
    its 1 MiB first bucket only to the default), to show the cap's effect alone.

    Returns times in seconds on one clock for every rank (labkit.ddp.clock): forward
    (start, end), backward (start, last gradient ready), synced (sync_gradients returned),
    grads [(name, t)], buckets [(index, launched, completed, bytes)], step (seconds)."""
    import torch
    import torch.distributed as dist
    import labkit
    from labkit.ddp.bucketed import BucketedDDP
    from labkit.ddp.clock import clock_for
    from labkit.toy_models import TinyGPT, lm_loss, token_batch
    device = labkit.device()
    torch.manual_seed(0)
    ddp = BucketedDDP(TinyGPT(cfg).to(device), bucket_cap_mb=bucket_cap_mb)
    ddp.clock = clock = clock_for(device)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = (t.to(device) for t in token_batch(batch, seq, cfg.vocab_size, seed=dist.get_rank()))
    for step in range(warmup + 1):
        if step == warmup:
            ddp.trace = []
        dist.barrier()
        t0 = clock.now()
        loss = lm_loss(ddp(x), y)
        t1 = clock.now()
        loss.backward()
        ddp.sync_gradients()
        t3 = clock.now()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ddp.remove_hooks()
    at = clock.resolve
    grads = [(name, at(t)) for kind, name, t, *_ in ddp.trace if kind == "grad"]
    buckets = [(i, at(a), at(b), nbytes) for kind, i, a, b, nbytes in
               (r for r in ddp.trace if r[0] == "bucket")]
    # backward compute ends when the last gradient is ready (hooks run inside backward)
    bwd = (at(t1), max([t for _, t in grads] + [at(t1)]))
    return {"rank": dist.get_rank(), "bucket_cap_mb": bucket_cap_mb, "forward": (at(t0), at(t1)),
            "backward": bwd, "synced": at(t3), "grads": grads, "buckets": buckets,
            "step": at(t3) - at(t0), "clock": type(clock).__name__}


def annotate(ranks: list) -> list:
    """Add to each rank's traced_step record: "running" [(start, end)] of each all-reduce
    from the moment every rank had launched it (and the previous one on this rank had
    finished) to its completion, "waiting" [(launch, last rank's launch)] when a slower rank
    launched it later, and "overlap": the
    share of running time inside this rank's backward. Returns `ranks`."""
    n = len(ranks[0]["buckets"])
    last_launch = [max(r["buckets"][i][1] for r in ranks) for i in range(n)]
    for r in ranks:
        running, waiting, prev = [], [], float("-inf")
        for (i, a, b, _), everyone in zip(r["buckets"], last_launch):
            running.append((min(max(everyone, prev, a), b), b))
            if everyone > a:                        # queued behind its own previous one: not waiting
                waiting.append((a, min(everyone, b)))
            prev = max(prev, b)
        r["running"], r["waiting"] = running, waiting
        r["overlap"] = overlap_fraction(r["backward"], running)
    return ranks


def plot_timelines(runs: dict, path: str = None):
    """runs: {label: [traced_step result by rank]}; one panel per label, one row per rank,
    every panel on the same time axis (ms since that step started) so steps compare."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    colour = {"forward": "#c7e9c0", "backward": "#31a354", "running": "#3182bd", "waiting": "#d9d9d9"}
    height = sum(0.9 + 0.55 * len(r) for r in runs.values()) + 0.8
    fig, axes = plt.subplots(len(runs), 1, figsize=_figsize((10, height), (10, min(height, 5.0))),
                             squeeze=False, sharex=True)    # on a slide: under a title and 3 lines of code
    longest = 0.0
    for ax, (label, ranks) in zip(axes[:, 0], runs.items()):
        annotate(ranks)
        t0 = min(r["forward"][0] for r in ranks)
        ms = lambda t: (t - t0) * 1e3           # noqa: E731 - ms since the first rank started
        for r in ranks:
            y = r["rank"]
            for key in ("forward", "backward"):
                a, b = r[key]
                ax.broken_barh([(ms(a), ms(b) - ms(a))], (y + 0.55, 0.35), color=colour[key])
            ax.broken_barh([(ms(a), ms(b) - ms(a)) for a, b in r["waiting"]], (y + 0.1, 0.35),
                           facecolor=colour["waiting"], hatch="///", edgecolor="0.55", linewidth=0.4)
            ax.broken_barh([(ms(a), max(ms(b) - ms(a), 0.05)) for a, b in r["running"]],
                           (y + 0.1, 0.35), color=colour["running"], edgecolor="white", linewidth=0.6)
            for _, a, _, _ in r["buckets"]:
                ax.plot([ms(a)] * 2, [y + 0.05, y + 0.5], color="k", lw=0.7)
            ax.plot([ms(r["synced"])] * 2, [y + 0.05, y + 0.95], "k:", lw=1)
            longest = max([longest, ms(r["synced"])] + [ms(b) for _, _, b, _ in r["buckets"]])
        n = len(ranks[0]["buckets"])
        mean = sum(r["overlap"] for r in ranks) / len(ranks)
        step = max(r["step"] for r in ranks) * 1e3
        ax.set_title(tr_fig("{label}: {n} buckets, step {step:.0f} ms, overlap {mean:.0%} (mean over ranks)",
                            label=label, n=n, step=step, mean=mean) if n != 1 else
                     tr_fig("{label}: {n} bucket, step {step:.0f} ms, overlap {mean:.0%} (mean over ranks)",
                            label=label, n=n, step=step, mean=mean), fontsize=_fs(9), loc="left")
        ax.set_yticks([r["rank"] + 0.5 for r in ranks], [f"rank {r['rank']}" for r in ranks])
        ax.set_ylim(0, len(ranks))
    axes[-1, 0].set_xlim(0, longest * 1.02)
    axes[-1, 0].set_xlabel(tr_fig("ms since the step started (same scale in every panel)"))
    handles = [Patch(color=colour["forward"], label=tr_fig("forward")),
               Patch(color=colour["backward"], label=tr_fig("backward")),
               Patch(color=colour["running"], label=tr_fig("all-reduce running (one bar per bucket)")),
               Patch(facecolor=colour["waiting"], hatch="///", edgecolor="0.55", linewidth=0.4,
                     label=tr_fig("all-reduce launched, waiting for a slower rank")),
               Line2D([], [], color="k", lw=0.7, label=tr_fig("bucket launched")),
               Line2D([], [], color="k", ls=":", label=tr_fig("gradients synced"))]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=_fs(8), frameon=False)
    legend_in = 0.45 * _fs(8) / 8 + (0.2 if _fs(8) > 8 else 0)     # two legend rows, in inches
    fig.tight_layout(rect=(0, legend_in / fig.get_size_inches()[1], 1, 1))
    if path:
        fig.savefig(path, dpi=100)
    return fig
