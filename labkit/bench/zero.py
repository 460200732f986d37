"""python -m labkit.bench zero [--ranks 4] [--rounds 4] [--mixed] [--layers 2] [--dim 256]

DDP (ZeRO-0) and labkit's ZeRO stages 1, 2, 3 (and torch's DDP + ZeroRedundancyOptimizer)
on one TinyGPT at 4 gloo ranks, in one run, stepped in turn round after round: step time
(median over rounds of the slowest rank's, and its ratio to DDP), model-state bytes per rank
(measured with labkit.memory.measure; the formula; the named padding and Adam counters),
bytes sent per rank per step (kernel TCP counters) against the parameter bytes: 2(N-1)/N for
DDP, ZeRO-1, ZeRO-2 and 3(N-1)/N for ZeRO-3.
"""
import argparse

import labkit


def table(res: dict) -> str:
    v, n, pb = res["variants"], res["world"], res["param_bytes"]
    ddp = v["ZeRO-0 (DDP)"]
    prec = "bf16 + fp32 masters" if res["mixed"] else "fp32"
    rows = [f"TinyGPT {res['psi']:,} parameters ({pb / 1e6:.2f} MB), Adam, {prec}, N={n} gloo ranks; "
            f"2(N-1)/N = {2 * (n - 1) / n:.2f}, 3(N-1)/N = {3 * (n - 1) / n:.2f}", "",
            "| variant | step ms | / DDP | model state MB per rank (rank 0) | formula MB | "
            "measured - formula | sent MB/step | sent / param bytes |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in v.items():
        f = f"{r['formula'] / 1e6:.3f}" if r["formula"] is not None else ""
        d = f"{r['memory'] - r['formula']:+,.0f} B" if r["formula"] is not None else ""
        rows.append(f"| {name} | {r['median'] * 1e3:.0f} | {r['median'] / ddp['median']:.2f} | "
                    f"{r['memory'] / 1e6:.3f} | {f} | {d} | {r['sent'] / 1e6:.2f} | "
                    f"{r['sent'] / pb:.3f} |")
    extras = {name: r["extras"] for name, r in v.items() if r["extras"] is not None}
    rows.append("")
    rows.append("measured - formula is the named extras exactly: padding to a multiple of N and "
                "Adam's 4-byte step counters (" + ", ".join(f"{k.split()[0]} {e:,.0f} B"
                                                            for k, e in extras.items()) + ")")
    rows.append("step ms: median over rounds of the slowest rank's step (2 shared CPU cores: "
                "compare the ratios, not the times)")
    return "\n".join(rows)


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench zero")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mixed", action="store_true", help="bf16 params/grads, fp32 masters")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=256)
    args = ap.parse_args(argv)
    from labkit.zero.runs import interleaved
    with labkit.Cluster(args.ranks, backend="gloo", spares=0, timeout=600) as c:
        res = c.run(interleaved, args.rounds, args.mixed, n_layer=args.layers, n_embd=args.dim,
                    vocab=4096, seq=64)
    print(table(res[0]))
    ok = all(r["memory"] - r["formula"] == r["extras"]
             for r in res[0]["variants"].values() if r["formula"] is not None)
    print(f"every rank 0 measurement equals formula + named extras: {ok}")
    return 0 if ok else 1
