"""python -m labkit.bench tricks [--world-size N] [--timed K] [--layers L] [--batch B]

Module 09's memory tricks: all 32 on/off combinations of mixed precision, full checkpointing,
gradient accumulation (4 micro-batches), 8-bit Adam and optimizer offload, plus selective
checkpointing and ZeRO-1 alone, each trained on N ranks of one cluster in one run. Prints peak
per rank on the device (MemTracker + measure) and stored activations against the formula, and
the step time, each as a ratio to the fp32 baseline of the same run. On a CPU-only machine
offload is accounting (nothing leaves a device) and times are CPU times.
"""
import argparse
import time


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench tricks")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--timed", type=int, default=5, help="timed steps per config: the fastest is kept")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    args = ap.parse_args(argv)
    import labkit
    from labkit.tricks import Config, Shape, combinations, compare
    shape = Shape(n_layer=args.layers, batch=args.batch)
    configs = combinations() + [Config(checkpointing="selective"), Config(zero=1)]
    t0 = time.perf_counter()
    with labkit.Cluster(args.world_size, spares=0) as cluster:
        results = compare.measure(cluster, configs, shape, timed=args.timed, timeout=3600)
    print(compare.table(results, shape, world_size=args.world_size))
    print()
    print(compare.priority(results))
    print(f"\n{len(configs)} configurations on {args.world_size} ranks in {time.perf_counter() - t0:.0f} s")
    return 0
