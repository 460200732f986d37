"""python -m labkit.bench tp [--ranks 4] [--hidden 1024] [--seq 256] [--repeats 5]

Tensor-parallel block on gloo ranks: bytes per forward and backward against the formula
(4 all-reduces per layer), sequence parallelism with labkit's ring and with torch's gloo
reduce-scatter, activation bytes saved for backward, and the time of one forward+backward
against the same block on one rank (ratios from the same run)."""
import argparse


def _time_block(n_embd, seq, repeats, tp, sp=False, impl="ring"):
    import time

    from labkit.tp.blocks import parallelize_blocks
    from labkit.tp.parity import _local_seq, batch, reference_blocks
    blocks = reference_blocks(2, n_embd, 8)
    x, w = batch(4, seq, n_embd)
    model = parallelize_blocks(blocks, None, sp, impl) if tp else blocks
    if sp:
        x, w = _local_seq(x, None), _local_seq(w, None)
    x.requires_grad_()
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        (model(x) * w).sum().backward()
        times.append(time.perf_counter() - t)
    return sorted(times[1:])[len(times[1:]) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench tp")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    import labkit
    from labkit.tp.parity import block_traffic, saved_activation_bytes
    kw = dict(n_embd=a.hidden, s=a.seq, n_head=8)
    with labkit.Cluster(a.ranks, backend="gloo", spares=0, timeout=600) as c:
        rows = {"TP": c.run(block_traffic, **kw)[0],
                "TP+SP ring": c.run(block_traffic, sequence_parallel=True, **kw)[0],
                "TP+SP gloo": c.run(block_traffic, sequence_parallel=True, impl="torch", **kw)[0]}
        for k, r in rows.items():
            print(f"{k:11s} forward {r['forward']:>12,} B  backward {r['backward']:>12,} B  "
                  f"formula {r['formula each way']:>12,.0f} B each way  ratio {r['forward'] / r['formula each way']:.3f}")
        m_tp = c.run(saved_activation_bytes, n_embd=a.hidden, s=a.seq, n_head=8)[0]
        m_sp = c.run(saved_activation_bytes, n_embd=a.hidden, s=a.seq, n_head=8, sequence_parallel=True)[0]
        print(f"saved for backward, 2 blocks: TP {m_tp / 1e6:.1f} MB, TP+SP {m_sp / 1e6:.1f} MB ({m_sp / m_tp:.2f}x)")
        t_tp = max(c.run(_time_block, a.hidden, a.seq, a.repeats, True))
        t_sp = max(c.run(_time_block, a.hidden, a.seq, a.repeats, True, True))
        t_one = c.run(_time_block, a.hidden, a.seq, a.repeats, False)[0]
    print(f"forward+backward of 2 blocks (median of {a.repeats}): one rank alone {t_one * 1e3:.0f} ms, "
          f"TP over {a.ranks} {t_tp * 1e3:.0f} ms ({t_one / t_tp:.2f}x), TP+SP {t_sp * 1e3:.0f} ms ({t_one / t_sp:.2f}x)")
    return 0
