"""python -m labkit.bench fsdp [--ranks 4] [--layers 4] [--dim 128]

One TinyGPT on N gloo ranks, in one run: FSDP2 per wrapping choice (full shard) and per
strategy (per-block wrapping), and labkit's own ZeRO-3 (module 04) beside them. For each: the
second training step's time (the slowest rank's), the peak bytes per rank over that step
(torch's FSDPMemTracker for FSDP2, its MemTracker for labkit's Stage3; the largest rank), and
the all-gathers and reduce-scatters per step. Step times on a shared CPU are noisy: compare
them within one run, as ratios.
"""
import argparse
import contextlib
import time

import labkit

VARIANTS = [("model", "full"), ("block", "full"), ("linear", "full"),
            ("block", "grad_op"), ("block", "no_shard"), ("block", "hybrid")]


def zero3_peak(batch_per_rank: int = 4, model_kw: dict = None) -> dict:
    """labkit.zero stage 3 on the same model: peak over the second step, calls, time."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.mem_tracker import MemTracker
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import lm_loss
    from labkit import trace
    from labkit.zero import wrap
    from labkit.zero.stage3 import Events
    n, r = dist.get_world_size(), dist.get_rank()
    net, batch = tiny_gpt(**(model_kw or {}))
    model, opt = wrap(net, torch.optim.Adam, stage=3, lr=1e-3)
    x, y = batch(n, batch_per_rank)
    x, y = x[batch_per_rank * r:batch_per_rank * (r + 1)], y[batch_per_rank * r:batch_per_rank * (r + 1)]
    tracker = MemTracker()
    tracker.track_external(model)                 # optimizer state is made inside, step 1
    events = Events(model)                        # the second step's hook calls
    with tracker:
        for i in range(2):
            if i == 1:
                tracker.reset_mod_stats()
                t0 = time.perf_counter()
            with trace.recording(events) if i == 1 else contextlib.nullcontext():
                lm_loss(model(x), y).backward()
                opt.step()
            opt.zero_grad()
        seconds = time.perf_counter() - t0
    peak = next(v["Total"] for k, v in tracker.get_tracker_snapshot("peak").items() if str(k) == "cpu")
    kinds = [e["kind"] for e in events.events]
    return {"rank": r, "total": peak, "seconds": seconds,
            "calls": {"all_gather": kinds.count("all-gather") + kinds.count("prefetch"),
                      "reduce_scatter": kinds.count("reduce-scatter")}}


def run_all(model_kw: dict) -> list:
    from labkit.fsdp.runs import peak_report
    out = [peak_report(wrap=w, strategy=s, model_kw=model_kw) for w, s in VARIANTS]
    out.append(zero3_peak(model_kw=model_kw))
    return out


def table(per_rank: list, psi: int, n: int) -> str:
    names = [f"FSDP2 wrap={w}, {s}" for w, s in VARIANTS] + ["labkit ZeRO-3 (Stage3, per block)"]
    base = max(r[1]["seconds"] for r in per_rank)
    rows = [f"TinyGPT {psi:,} parameters, Adam fp32, N={n} gloo ranks, second step", "",
            "| variant | step ms (slowest rank) | / block full | peak MB per rank (largest) | all-gathers | reduce-scatters |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for i, name in enumerate(names):
        t = max(r[i]["seconds"] for r in per_rank)
        peak = max(r[i]["total"] for r in per_rank)
        c = per_rank[0][i]["calls"]
        rows.append(f"| {name} | {t * 1e3:.0f} | {t / base:.2f} | {peak / 1e6:.3f} | {c['all_gather']} | {c['reduce_scatter']} |")
    rows += ["", "no_shard's gradient all-reduces (one per unit with gradients) are not in the counts: "
             "FSDP2 has no hook for a custom all-reduce; hybrid's cross-group all-reduces likewise."]
    return "\n".join(rows)


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench fsdp")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    args = ap.parse_args(argv)
    from labkit.fsdp.runs import tiny_gpt
    kw = {"n_layer": args.layers, "n_embd": args.dim}
    with labkit.Cluster(args.ranks, backend="gloo", spares=0, timeout=600) as c:
        res = c.run(run_all, kw, timeout=600)
    print(table(res, tiny_gpt(**kw)[0].num_params(), args.ranks))
    return 0
