"""python -m labkit.bench moe [--ranks 4] [--tokens 128] [--hidden 64]

Expert parallelism on gloo ranks: bytes per rank of the dispatch and combine all-to-alls against
the formula (balanced and skewed routing, torch's all_to_all_single and the hand-written one),
parameters and optimizer state per rank against the formula, the load per expert after training
with and without the balancing loss and tokens dropped against the capacity factor, and the
forward's time against the slowest rank's expert compute."""
import argparse


def _param_bytes(hidden, ffn, experts):
    import torch.distributed as dist
    from labkit.moe import formulas
    from labkit.moe.parallel import expert_parallel
    from labkit.moe.parity import build
    m = expert_parallel(build(hidden, ffn, experts))
    measured = sum(p.numel() * p.element_size() for p in m.parameters())
    return measured, formulas.state_bytes_per_rank(hidden, ffn, experts, dist.get_world_size())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench moe")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=64)
    a = ap.parse_args(argv)
    import labkit
    from labkit.moe.demo import step_times, train_load
    from labkit.moe.parity import ep_traffic
    n, E = a.ranks, 2 * a.ranks
    with labkit.Cluster(n, backend="gloo", spares=0, timeout=600) as c:
        print(f"bytes sent by rank 0, {a.tokens} tokens, hidden {a.hidden}, k=2, {E} experts "
              f"(balanced formula {(n - 1) / n * 2 * a.tokens * a.hidden * 4:,.0f} B each way)")
        for skew in (0.0, 4.0):
            for impl in ("torch", "p2p"):
                r = c.run(ep_traffic, tokens=a.tokens, hidden=a.hidden, experts=E, skew=skew, impl=impl)[0]
                for way in ("dispatch", "combine"):
                    print(f"  {'skewed' if skew else 'random':6s} {impl:5s} {way:8s} sent {r[way + ' sent']:>9,} B"
                          f"  payload formula {r[way + ' formula']:>9,} B  headers {r[way + ' sent'] - r[way + ' formula']:>5} B")
        measured, want = c.run(_param_bytes, a.hidden, 4 * a.hidden, E)[0]
        print(f"parameters per rank ({E // n} of {E} experts + router): measured {measured:,} B, formula "
              f"{want['params']:,} B; with Adam: {sum(want.values()):,} B per rank")
        print("load after 30 steps (tokens computed per expert, all ranks):")
        for aux in (0.0, 0.01, 1.0):
            h = c.run(train_load, aux_loss_weight=aux, experts=E, emit=False)[0]
            load = h[-1]["load"]
            busiest = max(sum(load[j * 2:j * 2 + 2]) for j in range(n)) / sum(load)
            print(f"  balancing loss {aux:<5} {load}  busiest rank {busiest:.2f} (balanced {1 / n:.2f})")
        for cf in (0.75, 1.0, 1.25, 2.0):
            h = c.run(train_load, aux_loss_weight=1.0, capacity_factor=cf, experts=E, emit=False)[0]
            print(f"  capacity factor {cf:<4}: copies dropped at step 0 {h[0]['dropped']}, at step 29 {h[-1]['dropped']}"
                  f" of {n * 64 * 2}")
        for skew in (0.0, 4.0):
            res = c.run(step_times, skew=skew, experts=E)
            slow = max(r["expert seconds"] for r in res)
            print(f"forward, {'skewed' if skew else 'random'}: rows per rank {[r['rows'] for r in res]}, expert ms per rank "
                  f"{[round(r['expert seconds'] * 1e3, 1) for r in res]}, forward ms on rank 0 "
                  f"{res[0]['forward seconds'] * 1e3:.1f} (slowest rank's experts {slow * 1e3:.1f})")
    return 0
