"""One training step of TinyGPT on every rank, measured: replicated (data parallel) and sharded
(FSDP2). The module 01 deck runs these; notebook 01 writes the same steps out in its cells.

    measured = labkit.memory.per_rank(cluster, replicated_step)   # one Breakdown per rank
    sharded = labkit.memory.per_rank(cluster, sharded_step)
"""


def _model_and_batch(batch: int, seq: int, n_layer: int):
    import torch
    import labkit
    from labkit.toy_models import GPTConfig, TinyGPT, token_batch
    torch.manual_seed(0)                                   # same initial weights on every rank
    model = TinyGPT(GPTConfig(n_layer=n_layer))            # FP32; 16.9 M parameters at 4 layers
    x, y = token_batch(batch, seq, model.cfg.vocab_size, seed=labkit.rank())   # a batch per rank
    return model, x, y


def replicated_step(batch: int = 2, seq: int = 128, n_layer: int = 4):
    """Data parallel: forward, backward, all-reduce each gradient and divide by N, AdamW step.
    Returns `labkit.memory.measure(model, optimizer)`: what the rank holds after the step."""
    import torch
    import torch.distributed as dist
    import labkit
    from labkit.memory.accounting import measure
    from labkit.toy_models import lm_loss
    model, x, y = _model_and_batch(batch, seq, n_layer)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    lm_loss(model(x), y).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= labkit.world_size()
    opt.step()
    return measure(model, opt)


def sharded_step(batch: int = 2, seq: int = 128, n_layer: int = 4):
    """The same step with FSDP2 (`fully_shard` per block, then the root): every parameter,
    gradient and AdamW state is a DTensor holding 1/N. Returns `measure(model, optimizer)`."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from labkit.memory.accounting import measure
    from labkit.toy_models import lm_loss
    model, x, y = _model_and_batch(batch, seq, n_layer)
    for block in model.blocks:
        fully_shard(block)                                 # one all-gather per block
    fully_shard(model)                                     # the rest: embeddings, final norm
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    lm_loss(model(x), y).backward()                        # gradients are reduce-scattered
    opt.step()
    return measure(model, opt)
