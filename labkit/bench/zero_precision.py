"""python -m labkit.bench zero_precision [--ranks 4]

labkit.zero stage 3 under a mixed-precision Policy, both layouts (fp32 masters in the optimizer,
DeepSpeed's; fp32 shards as the masters, FSDP2's), bf16 and fp16, reduced in 16 bits or fp32: model
state per rank measured against the formula plus its named extras (to the byte), bytes sent per
rank per step against the formula, the dtype of every collective, and the largest difference of the
parameters from one process that casts every parameter for compute (two SGD steps, TinyGPT).
"""
import argparse

import torch

import labkit

CASES = [(torch.bfloat16, "masters", None), (torch.float16, "masters", None), (torch.bfloat16, "sharded", None),
         (torch.float16, "sharded", None), (torch.bfloat16, "sharded", torch.float32)]


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench zero_precision")
    ap.add_argument("--ranks", type=int, default=4)
    args = ap.parse_args(argv)
    from labkit.zero.precision_runs import policy_report, tolerance
    rows = ["| layout | compute | reduce | model state B (rank 0) | formula + extras B | sent B | expected B | "
            "collectives | max diff / tolerance |", "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    ok = True
    with labkit.Cluster(args.ranks, backend="gloo", spares=0, timeout=600) as c:
        for dt, layout, rd in CASES:
            res = c.run(policy_report, dt, layout, rd)
            r = res[0]
            ok &= all(x["memory"].model_state == x["expected"].total.model_state and
                      x["max_diff"] <= tolerance(x, rd) for x in res)
            kinds = ", ".join(f"{k} {d} x{n}" for (k, d), n in sorted(r["collectives"].items()))
            rows.append(f"| {layout} | {str(dt)[6:]} | {str(rd or dt)[6:]} | {r['memory'].model_state:,} | "
                        f"{r['expected'].total.model_state:,.0f} | {r['sent']:,} | {r['expected_sent']:,.0f} | "
                        f"{kinds} | {r['max_diff']:.1e} / {tolerance(r, rd):.0e} |")
    print("\n".join(rows))
    print(f"every rank: model state = formula + extras to the byte, parameters within tolerance: {ok}")
    return 0 if ok else 1
