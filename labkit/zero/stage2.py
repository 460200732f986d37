"""Gradients leave each parameter as soon as backward accumulates them (layer 3).

Every trainable parameter gets a post-accumulate-grad hook (torch >= 2.1). The hook adds
`p.grad` into its bucket's flat gradient buffer at the parameter's offset and drops `p.grad`:

stage 0, 1  the buffer is persistent and is reduced in `step()` (once per optimizer step,
            however many micro-batches: like DDP's `no_sync`).
stage 2     the buffer exists only while its bucket fills; when the bucket's last gradient
            arrives it is reduce-scattered at once (in backward, bucket by bucket), this
            rank's shard of the sum is added into its persistent shard gradient, and the full
            buffer is freed. With gradient accumulation this happens on every micro-batch:
            stage 2 sends the gradients once per micro-batch, DDP with `no_sync` once per step.
A parameter that gets no gradient (unused in forward) would leave its bucket waiting: an
end-of-backward callback reduces any bucket still open, with zeros for the missing
gradients, so every rank calls the same collectives in the same order.
"""
import torch

from labkit.zero import flat as F


def make_hook(opt, bucket, param):
    """The post-accumulate-grad hook of `param` in `bucket` of ZeroOptimizer `opt`."""
    i = next(k for k, p in enumerate(bucket.params) if p is param)
    _, off, n, _ = bucket.layout.entries[i]

    @torch.no_grad()
    def hook(p):
        opt.backward_seen = True
        if opt.stage < 2:
            bucket.grad[off:off + n].add_(p.grad.reshape(-1))
            p.grad = None
            return
        if not opt.__dict__.get("_callback_queued"):
            opt._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(lambda: finish(opt))
        if bucket.grad is None:
            bucket.grad = bucket.param.new_zeros(bucket.layout.size, dtype=bucket.grad_dtype)
        bucket.grad[off:off + n].add_(p.grad.reshape(-1))
        p.grad = None
        bucket.ready += 1
        if bucket.ready == len(bucket.params):
            reduce_bucket(opt, bucket)
    return hook


@torch.no_grad()
def reduce_bucket(opt, bucket) -> None:
    """Reduce-scatter a full bucket, keep this rank's shard (averaged), free the rest."""
    shard = F.reduce_scatter(bucket.grad, opt.group).div_(opt.world)
    bucket.grad_shard.add_(shard.to(bucket.grad_shard.dtype))
    bucket.grad = None
    bucket.ready = 0


def finish(opt) -> None:
    """End of backward: reduce the buckets some of whose parameters got no gradient."""
    opt._callback_queued = False
    for b in opt.buckets:
        if b.grad is not None:
            reduce_bucket(opt, b)
