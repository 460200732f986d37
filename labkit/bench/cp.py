"""python -m labkit.bench cp [--ranks 4] [--seq 512] [--heads 8] [--head-dim 16]

Context parallelism on gloo ranks: outputs and gradients against one process, bytes on the wire
per rank against labkit.cp.formulas (ring and all-gather, forward and backward), score entries
computed per rank under a causal mask (contiguous against zigzag) against labkit.cp.layout, the
largest score block against the CP degree, a whole layer's activation bytes per rank against
Korthikanti's formula at s/N, the transfer and compute rates with the crossover block size, and (--torch) PyTorch's own context_parallel beside it."""
import argparse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench cp")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--torch", action="store_true", help="also try torch's context_parallel (minutes: imports DTensor)")
    a = ap.parse_args(argv)
    import labkit
    from labkit.cp import formulas as F
    from labkit.cp import layout as L
    from labkit.cp.parity import attention_parity, attention_traffic, attention_work
    from labkit.cp.runs import largest_scores_by_degree
    from labkit.cp.torch_cp import try_torch_cp
    from labkit.tables import Table
    n, s = a.ranks, a.seq
    with labkit.Cluster(n, backend="gloo", spares=0, timeout=600) as c:
        rows = []
        for method in F.METHODS:
            for layout in L.LAYOUTS:
                d = c.run(attention_parity, seq=s + 1, causal=True, method=method, layout=layout,
                          heads=a.heads, kv_heads=a.heads // 2, head_dim=a.head_dim)
                rows.append([method, layout, f"{max(max(x.values()) for x in d):.1e}"])
        print(Table([f"causal GQA, {s + 1} positions, {n} ranks", "layout", "max |diff| out, dq, dk, dv"], rows))
        rows = []
        for method in F.METHODS:
            for r, t in enumerate(c.run(attention_traffic, seq=s, method=method, layout="zigzag",
                                        heads=a.heads, head_dim=a.head_dim)):
                for ph in ("forward", "backward"):
                    want = t["formula"][ph]["on the wire"]
                    rows.append([method, r, ph, f"{t[ph]:,}", f"{want:,}", f"{t[ph] / want:.4f}"])
        print(Table(["method", "rank", "pass", "sent (measured)", "formula + gloo headers", "ratio"], rows))
        rows = []
        for layout in L.LAYOUTS:
            got = c.run(attention_work, seq=s, layout=layout, heads=a.heads, head_dim=a.head_dim)
            for r, g in enumerate(got):
                rows.append([layout, r, f"{g['score entries']:,}", f"{L.scores_computed(s, n, r, layout):,}",
                             f"{g['compute seconds'] * 1e3:.2f}"])
            work = [g["score entries"] for g in got]
            rows.append([layout, "busiest / mean", f"{L.imbalance(work):.2f}", "", ""])
        print(Table(["causal, layout", "rank", "score entries (measured)", "formula", "forward ms"], rows))
        degrees = [d for d in (1, 2, 4, 8) if d <= n]
        rows = []
        for method in F.METHODS:
            got = c.run(largest_scores_by_degree, seq=s, degrees=tuple(degrees), method=method)[0]
            for d in degrees:
                rows.append([method, d, f"{got[d]:,}", f"{F.score_entries(s, d, method=method, heads=1):,}"])
        print(Table(["method", "CP degree", "largest score block (measured)", "formula"], rows))
        from labkit.cp.parity import saved_for_backward
        rows = [[m, f"{r['measured']:,}", f"{r['formula']:,}"] for m in F.METHODS
                for r in [c.run(saved_for_backward, seq=s, method=m, heads=a.heads, head_dim=a.head_dim)[0]]]
        print(Table(["method", "kept for backward by rank 0, bytes", "formula"], rows))
        from labkit.cp.activations import by_degree
        rows = [[r["seq"], r["cp"], f"{r['measured']:,}", f"{r['total']:,.0f}", f"{r['scores, own rows']:,}"]
                for r in c.run(by_degree, seqs=(s // 2, s), degrees=tuple(degrees))[0]]
        print(Table(["one layer: s", "CP degree", "kept by rank 0, bytes", "Korthikanti at s/N + extras",
                     "scores if kept"], rows))
        from labkit.cp.runs import crossover, rates
        rr = [c.run(rates, block=b, heads=a.heads, head_dim=a.head_dim)[0] for b in (16, 64, 256)]
        print(Table(["block", "transfer ms", "compute ms"],
                    [[r["block"], f"{r['transfer s'] * 1e3:.2f}", f"{r['compute s'] * 1e3:.2f}"] for r in rr]))
        print(f"crossover block size (compute = transfer): {crossover(rr):.0f} positions")
        if a.torch:
            for causal in (False, True):
                r = c.run(try_torch_cp, causal=causal, seq=s, heads=a.heads, head_dim=a.head_dim)[0]
                print(f"torch context_parallel on gloo/CPU, causal={causal}, rank 0:", r)
    return 0
