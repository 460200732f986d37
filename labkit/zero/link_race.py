"""DDP against ZeRO-3 on a slow link and a fast one: the notes' "网络差时 ZeRO-3 会变慢".

    cluster.run(race, link=(0.0, 5e6))    # step seconds of ZeRO-0 (DDP) and ZeRO-3, on
                                          # loopback and with the sends paced at 5 MB/s
    cluster.run(race)                     # loopback only

ZeRO-3 sends 1.5x DDP's bytes (two all-gathers and a reduce-scatter against one all-reduce),
so where the link is slow and its time is not hidden, it is slower; where the link is fast,
the traffic is small against the compute and both take about the compute's time. Both
configurations are built on every rank and stepped in turn, loopback then the slow link
(DDP, ZeRO-3, DDP slow, ZeRO-3 slow, again ...), so that the four see the same load on the
machine; the slowest rank's time is kept per step, the median over the repeats.

The prediction is the planner's rule (`labkit.plan.planner.dp_exposed`) with the loopback DDP
step as the compute, plus what ZeRO-3 costs on loopback beyond DDP (the start-up of its many
gloo calls and their copies on the computing cores, which the planner does not model): that
extra grows with the load on the machine, and the race measures it beside the slow link.
"""
import contextlib
import statistics
import time

import torch
import torch.distributed as dist


def race(link=None, steps: int = 5, warmup: int = 1, n_layer: int = 2, n_embd: int = 128,
         vocab: int = 1024, seq: int = 32, batch: int = 4) -> dict:
    """On every rank: the median step seconds of stages 0 (DDP) and 3 of `labkit.zero` on
    loopback ("loopback ddp s", "loopback zero3 s") and, when `link` is given, with this rank's
    sends through `labkit.comm.link.throttled(*link)` ("ddp s", "zero3 s"; without `link`
    these are the loopback ones)."""
    from labkit.comm import link as slow
    from labkit.toy_models import lm_loss
    from labkit.zero import wrap
    from labkit.zero.runs import tiny_gpt
    runs = {}
    for stage in (0, 3):
        torch.manual_seed(0)
        net, batch_fn = tiny_gpt(n_layer=n_layer, n_embd=n_embd, vocab=vocab, seq=seq)
        runs[stage] = wrap(net, torch.optim.Adam, stage=stage, lr=1e-3)
    links = (None, link) if link else (None,)
    times = {(stage, on): [] for on in links for stage in runs}
    rank = dist.get_rank()
    for step in range(warmup + steps):
        for on in links:
            for stage, (model, opt) in runs.items():
                x, y = batch_fn(batch, 100 * step + rank)
                dist.barrier()
                with (slow.throttled(*on) if on else contextlib.nullcontext()):
                    t0 = time.perf_counter()
                    lm_loss(model(x).float(), y).backward()
                    opt.step()
                    took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64,
                                        device=next(model.parameters()).device)
                opt.zero_grad()
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                if step >= warmup:
                    times[stage, on].append(float(took))
    med = {k: statistics.median(v) for k, v in times.items()}
    params = sum(p.numel() * p.element_size() for p in runs[0][0].parameters())
    return {"link": link, "ddp s": med[0, link], "zero3 s": med[3, link], "ratio": med[3, link] / med[0, link],
            "loopback ddp s": med[0, None], "loopback zero3 s": med[3, None],
            "loopback ratio": med[3, None] / med[0, None],
            "param bytes": params, "world": dist.get_world_size()}


def predicted_ratio(compute_s: float, param_bytes: int, world: int, rate: float,
                    zero3_extra_s: float = 0.0) -> float:
    """The planner's ZeRO-3 / DDP step ratio (`labkit.plan.planner.dp_exposed`: DDP's buckets
    hide behind 2/3 of the compute, ZeRO-3's gathers behind all of it) for traffic of 2 and 3
    (N-1)/N x the parameter bytes at `rate` bytes per second, and `compute_s` of compute;
    `zero3_extra_s` is added to ZeRO-3's step (what it costs beyond DDP with no link time)."""
    from labkit.plan.planner import dp_exposed
    ring = (world - 1) / world * param_bytes / rate
    ddp = compute_s + dp_exposed(2 * ring, compute_s, 0)
    zero3 = compute_s + zero3_extra_s + dp_exposed(3 * ring, compute_s, 3)
    return zero3 / ddp


def race_prediction(result: dict) -> float:
    """The slow link's predicted ratio for a `race` result: the planner's rule with the loopback
    DDP step as the compute and ZeRO-3's loopback extra over DDP added to its step."""
    return predicted_ratio(result["loopback ddp s"], result["param bytes"], result["world"], result["link"][1],
                           max(0.0, result["loopback zero3 s"] - result["loopback ddp s"]))


def race_verdict(result: dict, tolerance: float = 0.25) -> bool:
    """ok when on the slow link ZeRO-3 is slower than DDP by more than 20 % and its measured
    ratio is within `tolerance` of `race_prediction`."""
    from labkit.i18n import tr
    from labkit.verdict import verdict
    want = race_prediction(result)
    ok = result["ratio"] > 1.2 and abs(result["ratio"] / want - 1) <= tolerance
    return verdict(ok, tr("slow link ({rate:g} MB/s): ZeRO-3 / DDP step = {got:.2f}, the planner predicts "
                          "{want:.2f} with ZeRO-3's loopback extra (within {tol:.0%}; ZeRO-3 sends 1.5x "
                          "DDP's bytes)",
                          rate=result["link"][1] / 1e6, got=result["ratio"], want=want, tol=tolerance))
