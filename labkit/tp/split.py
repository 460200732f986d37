"""What tensor parallelism divides on a rank, counted: the FLOPs of one forward and backward
and the weights, against the same block on one device.

    cluster.run(compute_split)      # per rank: FLOPs and weights, TP and one device

TP splits every matrix product of the block t ways (attention heads, the MLP's hidden units),
so each rank does 1/t of the block's matrix FLOPs, as it holds 1/t of its split weights. What
it does not split is counted apart: the layer norms and the row-parallel biases are whole on
every rank (replicated), and the non-matrix work (softmax, GELU, norms) is not counted by
torch's FLOP counter, which counts matrix products and attention only.
"""
import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode


def _flops(module, x, w) -> int:
    with FlopCounterMode(display=False) as fc:
        (module(x) * w).sum().backward()
    return int(fc.get_total_flops())


def compute_split(n_layer: int = 1, n_embd: int = 64, n_head: int = 4, b: int = 2, s: int = 16,
                  group=None) -> dict:
    """This rank's FLOPs (forward + backward, matrix products) and weights of a TP block, and
    the same block's on one device (`labkit.tp.parity.reference_blocks`)."""
    from labkit.clipping import _mark_replicated
    from labkit.tp.blocks import parallelize_blocks
    from labkit.tp.parity import batch, reference_blocks
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, w = batch(b, s, n_embd)
    full_flops = _flops(ref, x.clone().requires_grad_(), w)
    full = sum(p.numel() for p in ref.parameters())
    tp = parallelize_blocks(ref, group)
    _mark_replicated(tp)
    flops = _flops(tp, x.clone().requires_grad_(), w)
    split = sum(p.numel() for p in tp.parameters() if not p.tp_replicated)
    replicated = sum(p.numel() for p in tp.parameters() if p.tp_replicated)
    return {"rank": dist.get_rank(), "t": dist.get_world_size(group), "flops": flops,
            "one device flops": full_flops, "weights split": split, "weights replicated": replicated,
            "one device weights": full}
