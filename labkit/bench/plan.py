"""python -m labkit.bench plan [--full-step] [--sizes 8,64,1024]

The planner's known cases (with CP for Llama 3 405B at 128K tokens, EP for Mixtral 8x7B and
DeepSeek-V3), then the real Llama 2 7B / 70B sharded by FSDP2 (+ TP 8 for 70B, + CP 16 for one
70B case) and a Mixtral-8x7B-shaped model with EP 8 on a fake process group of each size,
per-rank bytes against the formula; with --full-step, the
peak of a whole 80-layer 70B step tracked by FSDPMemTracker under fake tensors (tens of seconds)."""
import argparse
import time

from labkit.memory import GB


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench plan")
    ap.add_argument("--sizes", default="8,64,1024")
    ap.add_argument("--full-step", action="store_true", help="track a full-depth 70B step (slow)")
    args = ap.parse_args(argv)
    from labkit.plan.fake_scale import fake_scale
    from labkit.plan.shapes import MODELS, Hardware
    from labkit.plan.planner import plan
    for k, hw in (("1B", Hardware(gpus_per_node=1)), ("7B", Hardware()), ("70B", Hardware(nodes=4)),
                  ("175B", Hardware(gpu="A100-80GB", nodes=128)), ("405B-128K", Hardware(nodes=2048)),
                  ("Mixtral-8x7B", Hardware(nodes=8)), ("DeepSeek-V3", Hardware(gpu="H800-80GB", nodes=256))):
        t = time.perf_counter()
        p = plan(MODELS[k], hw)
        print(f"{k:12s} on {hw.gpus:5d} x {hw.gpu}: {p.chosen.short()}  [{time.perf_counter() - t:.2f} s to plan]")
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = [("7B", n, 1) for n in sizes] + [("70B", n, 8) for n in sizes] + [("70B", 1024, 8, 16)]
    step = dict(name="70B", n_layers=80, world_size=1024, tp=8, seq=4096) if args.full_step else None
    moe = [("Mixtral-8x7B", 64, 8), ("Mixtral-8x7B", 64, 1), ("Mixtral-8x7B", 64, 8, 0)]
    out = fake_scale(cases, step=step, timeout=1800, moe=moe)
    print(f"{'model':5s} {'N':>5s} {'TP':>3s} {'CP':>3s} {'measured GB':>12s} {'formula GB':>11s} {'DP-only GB':>11s} "
          f"{'padding kB':>11s} {'diff B':>7s} {'seconds':>8s}")
    for r in out["rows"]:
        print(f"{r['model']:5s} {r['world_size']:5d} {r['tp']:3d} {r['cp']:3d} {r['measured'] / GB:12.3f} {r['formula'] / GB:11.3f} "
              f"{r['dp only'] / GB:11.3f} {r['padding'] / 1e3:11.1f} {r['difference']:7.0f} {r['seconds']:8.1f}")
    print(f"{'MoE model':12s} {'N':>4s} {'EP':>3s} {'EDP':>4s} {'split':>6s} {'measured GB':>12s} "
          f"{'formula GB':>11s} {'padding MB':>11s} {'diff B':>7s} {'gathered experts GB':>20s}")
    for r in out["moe"]:
        print(f"{r['model']:12s} {r['world_size']:4d} {r['ep']:3d} {r['edp']:4d} {'dim ' + str(r['expert dim']):>6s} "
              f"{r['measured'] / GB:12.3f} {r['formula'] / GB:11.3f} {r['padding'] / 1e6:11.1f} "
              f"{r['difference']:7.0f} {r['gathered experts'] / GB:20.3f}")
    if out["step"]:
        st = out["step"]
        print(f"{st['model']} N={st['world_size']} TP={st['tp']}: peak of step 2 by category (GB), "
              f"{st['seconds']:.0f} s:")
        for k, v in st["peak"].items():
            if v:
                print(f"  {k:16s} {v / GB:8.2f}")
        print(f"  formula: sharded params {st['formula params'] / GB:.2f}, Adam state {st['formula optimizer'] / GB:.2f}")
    return 0
