"""DDP against ZeRO-3 on a slow link and a fast one: the notes' "网络差时 ZeRO-3 会变慢".

    cluster.run(race, link=(0.0, 5e6))    # step seconds of ZeRO-0 (DDP) and ZeRO-3, 5 MB/s
    cluster.run(race)                     # the same on loopback

ZeRO-3 sends 1.5x DDP's bytes (two all-gathers and a reduce-scatter against one all-reduce),
so where the link is slow and its time is not hidden, it is slower; where the link is fast,
the traffic is small against the compute and both take about the compute's time. Both
configurations are built on every rank and stepped in turn (A B A B ...), the slowest rank's
time kept per step, the median over the repeats: the ratio of the two is the measurement.
"""
import statistics
import time

import torch
import torch.distributed as dist


def race(link=None, steps: int = 3, warmup: int = 1, n_layer: int = 2, n_embd: int = 128,
         vocab: int = 1024, seq: int = 32, batch: int = 4) -> dict:
    """On every rank: {stage: median step seconds} for stages 0 and 3 of `labkit.zero`, with
    this rank's sends through `labkit.comm.link.throttled(*link)` when `link` is given."""
    from labkit.comm import link as slow
    from labkit.toy_models import lm_loss
    from labkit.zero import wrap
    from labkit.zero.runs import tiny_gpt
    runs = {}
    for stage in (0, 3):
        torch.manual_seed(0)
        net, batch_fn = tiny_gpt(n_layer=n_layer, n_embd=n_embd, vocab=vocab, seq=seq)
        runs[stage] = wrap(net, torch.optim.Adam, stage=stage, lr=1e-3)
    times = {0: [], 3: []}
    rank = dist.get_rank()
    for step in range(warmup + steps):
        for stage, (model, opt) in runs.items():
            x, y = batch_fn(batch, 100 * step + rank)
            dist.barrier()
            with (slow.throttled(*link) if link else _Nothing()):
                t0 = time.perf_counter()
                lm_loss(model(x).float(), y).backward()
                opt.step()
                took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                                    device=next(model.parameters()).device)
            opt.zero_grad()
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            if step >= warmup:
                times[stage].append(float(took))
    params = sum(p.numel() * p.element_size() for p in runs[0][0].parameters())
    return {"link": link, "ddp s": statistics.median(times[0]), "zero3 s": statistics.median(times[3]),
            "ratio": statistics.median(times[3]) / statistics.median(times[0]),
            "param bytes": params, "world": dist.get_world_size()}


def predicted_ratio(compute_s: float, param_bytes: int, world: int, rate: float) -> float:
    """The planner's ZeRO-3 / DDP step ratio (`labkit.plan.planner.dp_exposed`: DDP's buckets
    hide behind 2/3 of the compute, ZeRO-3's gathers behind all of it) for traffic of 2 and 3
    (N-1)/N x the parameter bytes at `rate` bytes per second, and `compute_s` of compute."""
    from labkit.plan.planner import dp_exposed
    ring = (world - 1) / world * param_bytes / rate
    ddp = compute_s + dp_exposed(2 * ring, compute_s, 0)
    zero3 = compute_s + dp_exposed(3 * ring, compute_s, 3)
    return zero3 / ddp


def race_verdict(slow: dict, fast: dict, tolerance: float = 0.25) -> bool:
    """ok when on the slow link ZeRO-3 is slower than DDP by more than 20 % and its measured
    ratio is within `tolerance` of the planner's prediction (compute: the loopback DDP step)."""
    from labkit.i18n import tr
    from labkit.verdict import verdict
    want = predicted_ratio(fast["ddp s"], slow["param bytes"], slow["world"], slow["link"][1])
    ok = slow["ratio"] > 1.2 and abs(slow["ratio"] / want - 1) <= tolerance
    return verdict(ok, tr("slow link ({rate:g} MB/s): ZeRO-3 / DDP step = {got:.2f}, the planner predicts "
                          "{want:.2f} (within {tol:.0%}; ZeRO-3 sends 1.5x DDP's bytes)",
                          rate=slow["link"][1] / 1e6, got=slow["ratio"], want=want, tol=tolerance))


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
