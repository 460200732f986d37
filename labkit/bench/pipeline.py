"""python -m labkit.bench pipeline [--pad 0.01] [--ms 4 8 16] [--skip-torch] [--v-only]

On 4 gloo ranks, in one run: the bubble of each schedule measured with compute padded to
`pad` seconds per layer (forward; backward twice), against the formula (p-1)/(vm+p-1) and
against simulate() with this run's measured times; the same unpadded; peak saved activations
per stage for GPipe and 1F1B; one slow stage and its rebalancing; ZB-V and DualPipeV (--v-only: only
them); and the same model under
torch.distributed.pipelining (same loss, step time side by side, median of the slowest rank's).
"""
import argparse
import statistics
import time

import labkit
from labkit.pipeline import bubble_ratio, build, first_stage_activations, simulate
from labkit.pipeline.executor import run_schedule
from labkit.pipeline.timeline import held_measured, simulated_twin, timeline_of
from labkit.pipeline.torch_pp import torch_step

NAMES = ["gpipe", "1f1b", "interleaved", "zb-h1"]


def _run(c, name, m, **kw):
    s = build(name, c.world_size, m, chunks=2)
    return s, timeline_of(c.run(run_schedule, s, live=False, timeout=120, **kw), s)


def bubbles(c, ms, pad) -> list:
    rows = ["| schedule | m | pad ms/layer | measured | formula | meas - formula | simulated (measured times) "
            "| meas - sim | grad max diff |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in NAMES:
        for m in ms:
            for p_ in ((pad, None) if m == 8 and name in ("gpipe", "1f1b") else (pad,)):
                s, t = _run(c, name, m, pad=p_)
                f = bubble_ratio(s.stages, m, s.chunks)
                sim = simulated_twin(t, s).bubble
                fcol = f"{f:.3f}" if name != "zb-h1" else f"({f:.3f})"
                rows.append(f"| {s.name} | {m} | {p_ * 1e3 if p_ else 'none'} | {t.bubble:.3f} | {fcol} | "
                            f"{t.bubble - f:+.3f} | {sim:.3f} | {t.bubble - sim:+.3f} | "
                            f"{t.extra['grad_diff']:.1e} |")
    rows.append("(formula for ZB-H1 in brackets: the 1F1B formula it beats; ZB-H1's own is "
                "(p-1)(F+I-W) idle per stage, Qi et al. 2024)")
    return rows


def memory(c, pad) -> list:
    rows = ["| schedule | m | peak saved activations per stage, KiB | micro-batches alive per stage |",
            "| --- | ---: | --- | --- |"]
    for name in ("gpipe", "1f1b"):
        for m in (4, 8, 16):
            s, t = _run(c, name, m, warmup=0, check=False)
            rows.append(f"| {s.name} | {m} | {', '.join(f'{b / 1024:.0f}' for b in t.extra['peak_bytes'])} | "
                        f"{t.peak_activations} |")
    return rows


def imbalance(c, pad) -> list:
    rows = ["| layers per stage | measured bubble | simulated (measured times) | step s | formula (equal stages) |",
            "| --- | ---: | ---: | ---: | ---: |"]
    for sizes in ([1, 1, 5, 1], [2, 2, 2, 2]):
        s, t = _run(c, "1f1b", 8, pad=pad, sizes=sizes)
        rows.append(f"| {sizes} | {t.bubble:.3f} | {simulated_twin(t, s).bubble:.3f} | {t.makespan:.3f} | "
                    f"{bubble_ratio(4, 8):.3f} |")
    return rows


def v_schedules(c, pad, ms=(8, 16)) -> list:
    """ZB-V and DualPipeV: the bubble measured (whole step and within each rank's span) against
    the simulated twin, activations held on rank 0 (every layer trains) against the formula."""
    rows = ["| schedule | m | measured bubble | simulated (measured times) | simulated F = I = W | own span: measured "
            "| own span: sim | own span: F = I = W | rank 0 holds, measured | formula | grad max diff |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in ("zb-v", "dualpipe-v"):
        for m in ms:
            s, t = _run(c, name, m, pad=pad)
            twin, equal = simulated_twin(t, s), simulate(s, 1, 1, 1)      # padding makes F = I = W
            _, mem = _run(c, name, m, frozen=None, check=False)
            rows.append(f"| {s.name} | {m} | {t.bubble:.3f} | {twin.bubble:.3f} | {equal.bubble:.3f} | "
                        f"{t.span_bubble:.3f} | {twin.span_bubble:.3f} | {equal.span_bubble:.3f} | "
                        f"{held_measured(mem)[0]:.2f} | "
                        f"{first_stage_activations(name, 4, m):g} | {t.extra['grad_diff']:.1e} |")
    rows.append("(own span: 1 - busy / the longest rank's first-to-last span, the zero-bubble papers' convention; "
                "holds: micro-batches' worth through a rank's layers)")
    return rows


def torch_compare(c, m=8, repeats=5) -> list:
    rows = ["| schedule | labkit step ms | torch step ms | labkit / torch | labkit loss | torch loss |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in ("gpipe", "1f1b", "interleaved"):
        ref = c.run(torch_step, name, m, warmup=2, repeats=repeats, timeout=300)
        ours = c.run(run_schedule, build(name, 4, m), live=False, warmup=2, repeats=repeats, timeout=120)
        a, b = statistics.median(ours[0]["times"]), statistics.median(ref[0]["times"])
        rows.append(f"| {name} ({ref[0]['schedule']}) | {a * 1e3:.1f} | {b * 1e3:.1f} | {a / b:.2f} | "
                    f"{sum(r['loss'] for r in ours):.6f} | {ref[-1]['loss']:.6f} |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench pipeline")
    ap.add_argument("--pad", type=float, default=0.01, help="padded compute, seconds per layer")
    ap.add_argument("--ms", type=int, nargs="+", default=[4, 8, 16], help="micro-batch counts")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--v-only", action="store_true", help="only the ZB-V and DualPipeV table")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with labkit.Cluster(4, backend="gloo", spares=0, timeout=300) as c:
        print(f"p=4 gloo ranks, mlp 8 layers x 64, 4 rows per micro-batch, {c.threads_per_rank} thread(s) per rank\n")
        if args.v_only:
            print("\n".join(v_schedules(c, args.pad)), "\n")
            print(f"(bench took {time.perf_counter() - t0:.0f} s)")
            return 0
        print("\n".join(bubbles(c, args.ms, args.pad)), "\n")
        print("\n".join(memory(c, args.pad)), "\n")
        print("\n".join(imbalance(c, args.pad)), "\n")
        print("\n".join(v_schedules(c, args.pad)), "\n")
        if not args.skip_torch:
            print("\n".join(torch_compare(c)), "\n")
    print(f"(bench took {time.perf_counter() - t0:.0f} s)")
    return 0
