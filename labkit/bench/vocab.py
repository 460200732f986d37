"""python -m labkit.bench vocab [--ranks 4] [--tokens 1024] [--vocab 16384] [--repeats 5]

The vocabulary split over TP ranks: bytes of logits each rank holds and the loss keeps for
backward, three ways (one device, logits all-gathered then torch's cross-entropy, loss
parallel), against the formula; and the time of the loss's forward+backward on this rank's
logits, gathered against loss parallel (median of --repeats; ratios from the same run)."""
import argparse


def _time_loss(tokens, vocab, repeats, parallel):
    import time

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from labkit.tp.vocab import vocab_parallel_cross_entropy
    t, r = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(3)
    full = torch.randn(tokens, vocab, generator=g)
    tgt = torch.randint(0, vocab, (tokens,), generator=g)
    k = vocab // t
    mine = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    parts = [torch.empty_like(mine) for _ in range(t)]
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        if parallel:
            vocab_parallel_cross_entropy(mine, tgt).mean().backward()
        else:
            dist.all_gather(parts, mine.detach())
            whole = torch.cat(parts, dim=1).requires_grad_()
            F.cross_entropy(whole, tgt).backward()
        times.append(time.perf_counter() - t0)
    return sorted(times[1:])[len(times[1:]) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench vocab")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    import labkit
    from labkit.tp.vocab import logits_bytes
    from labkit.tp.split import vocab_memory
    want = logits_bytes(a.tokens, a.vocab, a.ranks)
    with labkit.Cluster(a.ranks, backend="gloo", spares=0, timeout=600) as c:
        got = c.run(vocab_memory, tokens_=a.tokens, vocab=a.vocab)[0]
        for way in want:
            print(f"{way:29s} logits {got[way]['logits']:>13,} B (formula {want[way]['logits']:>13,} B)  "
                  f"kept for backward {got[way]['saved by the loss']:>13,} B (formula {want[way]['saved by the loss']:>13,} B "
                  f"+ ids and masks)")
        t_g = max(c.run(_time_loss, a.tokens, a.vocab, a.repeats, False))
        t_p = max(c.run(_time_loss, a.tokens, a.vocab, a.repeats, True))
    print(f"loss forward+backward, slowest rank (median of {a.repeats}): gathered {t_g * 1e3:.1f} ms, "
          f"loss parallel {t_p * 1e3:.1f} ms ({t_g / t_p:.2f}x)")
    return 0
