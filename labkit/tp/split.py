"""What tensor parallelism divides on a rank, counted: the FLOPs of one forward and backward
and the weights, against the same block on one device; the logits and what the loss keeps for
backward when the vocabulary is split.

    cluster.run(compute_split)      # per rank: FLOPs and weights, TP and one device
    cluster.run(vocab_memory)       # per rank: logits and saved-for-backward bytes, 3 ways

TP splits every matrix product of the block t ways (attention heads, the MLP's hidden units),
so each rank does 1/t of the block's matrix FLOPs, as it holds 1/t of its split weights. What
it does not split is counted apart: the layer norms and the row-parallel biases are whole on
every rank (replicated), and the non-matrix work (softmax, GELU, norms) is not counted by
torch's FLOP counter, which counts matrix products and attention only.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import labkit
from labkit import trace
from labkit.tp.vocab import vocab_parallel_cross_entropy


def _flops(module, x, w) -> int:
    with FlopCounterMode(display=False) as fc:
        (module(x) * w).sum().backward()
    return int(fc.get_total_flops())


def compute_split(n_layer: int = 1, n_embd: int = 64, n_head: int = 4, b: int = 2, s: int = 16,
                  group=None) -> dict:
    """This rank's FLOPs (forward + backward, matrix products) and weights of a TP block, and
    the same block's on one device (`labkit.tp.parity.reference_blocks`)."""
    from labkit.tp.layers import mark_replicated
    from labkit.tp.blocks import parallelize_blocks
    from labkit.tp.parity import batch, reference_blocks
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, w = batch(b, s, n_embd)
    full_flops = _flops(ref, x.clone().requires_grad_(), w)
    full = sum(p.numel() for p in ref.parameters())
    tp = parallelize_blocks(ref, group)
    mark_replicated(tp)
    flops = _flops(tp, x.clone().requires_grad_(), w)
    split = sum(p.numel() for p in tp.parameters() if not p.tp_replicated)
    replicated = sum(p.numel() for p in tp.parameters() if p.tp_replicated)
    return {"rank": dist.get_rank(), "t": dist.get_world_size(group), "flops": flops,
            "one device flops": full_flops, "weights split": split, "weights replicated": replicated,
            "one device weights": full}


def _saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves while `fn()` runs."""
    with trace.saved_bytes(per="storage") as saved:
        fn()
    return saved.bytes


def vocab_memory(tokens_=512, vocab=4096, group=None) -> dict:
    """This rank's logits bytes and the bytes the loss saves for backward (`tokens_` positions,
    fp32), three ways: one device, logits all-gathered then torch's cross-entropy, loss parallel.
    Also the largest difference of the two parallel losses from one device."""
    t, r = dist.get_world_size(group), dist.get_rank(group)
    g = torch.Generator().manual_seed(3)
    full = torch.randn(tokens_, vocab, generator=g).to(labkit.device())
    tgt = torch.randint(0, vocab, (tokens_,), generator=g).to(labkit.device())
    k = vocab // t
    mine = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    want = F.cross_entropy(full, tgt)
    res = {}
    one = full.clone().requires_grad_()
    res["one device"] = {"logits": one.numel() * one.element_size(),
                         "saved by the loss": _saved_bytes(lambda: F.cross_entropy(one, tgt))}
    parts = [torch.empty_like(mine) for _ in range(t)]

    def gathered():
        dist.all_gather(parts, mine.detach())
        whole = torch.cat(parts, dim=1).requires_grad_()   # as if all-gathered in autograd
        res["gathered, then cross-entropy"] = {"logits": mine.numel() * 4 + whole.numel() * 4}
        res["diff gathered"] = (F.cross_entropy(whole, tgt) - want).abs().item()
    saved = _saved_bytes(gathered)
    res["gathered, then cross-entropy"]["saved by the loss"] = saved

    def parallel():
        res["diff loss parallel"] = (vocab_parallel_cross_entropy(mine, tgt, group).mean() - want).abs().item()
    res["loss parallel"] = {"logits": mine.numel() * mine.element_size(), "saved by the loss": _saved_bytes(parallel)}
    return res
