"""Gradient accumulation: a large batch from small ones (layer 3, inside a rank).

    accumulate(model, x, y, micro=4)     # grads of the mean loss over every rank's x, one all-reduce

The batch on each rank is cut into `micro` equal micro-batches; each one's loss is divided by
`micro` before backward, so the gradients that add up in `.grad` are those of the mean loss
over the whole local batch; the sum over ranks, divided by the world size, is the gradient of
one process on the global batch (world x local sequences). The all-reduce is made once, after
the last micro-batch (DDP's `no_sync` for the others): accumulation costs no extra traffic.
Activations are those of one micro-batch: 1/micro of the big batch's.
"""
import torch
import torch.distributed as dist

from labkit.i18n import tr
from labkit.toy_models import lm_loss


def accumulate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, micro: int,
               loss_fn=lm_loss, sync: bool = True) -> float:
    """Forward and backward `micro` micro-batches, then average the gradients over ranks (once).
    Returns the mean loss over the local batch."""
    if x.size(0) % micro:
        raise ValueError(tr("the batch of {n} does not split into {micro} equal micro-batches", n=x.size(0),
                            micro=micro))
    total = 0.0
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        loss = loss_fn(model(xs), ys) / micro        # mean over the micro-batch, / micro: the batch mean
        loss.backward()
        total += loss.item()
    if sync and dist.is_initialized():
        n = dist.get_world_size()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= n
    return total


# Derived, not tuned (labkit.numerics.chain_bound): the reductions along one forward and
# backward of parity's TinyGPT (2 blocks, 64 wide, 4 heads, vocab 256), taken on micro-batches
# of another size and added in another order (micro-batches, then the all-reduce) than one
# process's pass over the global batch. SCALE bounds every value the chain computes (every
# module's output, the logits, the gradients; tests/tricks/test_tricks.py checks it on one process:
# 4.3 at most, the gradients 0.085).
SCALE = 8.0


def tolerance(n: int, micro: int = 4, per_rank: int = 8, seq: int = 32) -> float:
    """The most `parity`'s max_diff may be on any CPU (fp32): the blocks' chain (labkit.tp.parity.
    reduction_lengths over the n per_rank x seq tokens), the head (64), the log-sum-exp over the
    vocabulary (+ the target), the micro-batches' and ranks' sum and the two divisions."""
    from labkit.numerics import chain_bound
    from labkit.tp.parity import reduction_lengths
    return chain_bound(reduction_lengths(2, 64, 4, n * per_rank, seq) + [64, 257, micro + n + 2], SCALE)


def parity(micro: int = 4, per_rank: int = 8, seq: int = 32, seed: int = 0) -> dict:
    """On each rank: TinyGPT gradients with accumulation over `micro` micro-batches and one
    all-reduce, against one process on the global batch (all ranks' sequences at once).
    Returns the largest difference over all gradients and the size of the gradients."""
    from labkit.toy_models import GPTConfig, TinyGPT, token_batch
    n, r = dist.get_world_size(), dist.get_rank()
    cfg = GPTConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=256, block_size=seq)
    torch.manual_seed(seed)
    model = TinyGPT(cfg)
    torch.manual_seed(seed)
    big = TinyGPT(cfg)
    X, Y = token_batch(n * per_rank, seq, cfg.vocab_size, seed=seed + 1)
    mine = slice(r * per_rank, (r + 1) * per_rank)
    accumulate(model, X[mine], Y[mine], micro)
    lm_loss(big(X), Y).backward()                       # one process, the global batch at once
    diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(model.parameters(), big.parameters()))
    scale = max(q.grad.abs().max().item() for q in big.parameters())
    return {"rank": r, "micro": micro, "global_batch": n * per_rank, "max_diff": diff, "grad_max": scale}
