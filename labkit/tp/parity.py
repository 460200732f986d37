"""Run on every rank: tensor-parallel blocks against the same blocks on one device, and the
vocabulary-parallel embedding and loss against one device, torch's `loss_parallel` beside them.

    cluster.run(block_parity, sequence_parallel=False)  # -> per rank: max |diff| of output,
                                                         #    input grad and every parameter grad
    cluster.run(block_traffic)                          # bytes per forward / backward, vs formula
    cluster.run(vocab_parity)       # -> per rank: max |diff| of loss and every gradient
    cluster.run(torch_loss_parallel)   # -> torch's DTensor loss_parallel: diffs, collectives
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import labkit
from labkit import trace
from labkit.comm import traffic
from labkit.toy_models import Block, GPTConfig
from labkit.tp.blocks import TPBlock, full_grad_slice, parallelize_blocks, sync_sequence_parallel_grads
from labkit.tp.layers import ColumnParallelLinear
from labkit.tp.vocab import VocabParallelEmbedding, vocab_parallel_cross_entropy


# Derived, not tuned (labkit.numerics.chain_bound): the reductions along the longest chain of
# one forward and backward through these blocks, each summed in another order on the ranks
# (split over heads and columns, then the all-reduce) than on one device. SCALE bounds every
# value compared (tests/tp/test_tp.py checks it on one process: outputs reach 3.9, gradients 15).
SCALE = 16.0


def reduction_lengths(n_layer=2, n_embd=64, n_head=4, b=2, s=16) -> list:
    """The reduction lengths along one forward and backward of `n_layer` blocks: per block
    forward the two LayerNorms (mean and variance over h), qkv (h), the scores (head size),
    softmax and attention over s, proj (h), fc (h) and fc_out (4h); backward the transposed
    matmuls (3h, h, 4h, h), the attention again and both LayerNorms; then the weight gradients'
    sum over the b s tokens."""
    h, hd = n_embd, n_embd // n_head
    forward = 2 * h + h + hd + 2 * s + h + 2 * h + h + 4 * h
    backward = 3 * h + h + 4 * h + h + hd + 2 * s + 2 * 2 * h
    return [forward, backward] * n_layer + [b * s]


def tolerance(n_layer=2, n_embd=64, n_head=4, b=2, s=16) -> float:
    """The most `block_parity`'s differences may be on any CPU (fp32): see SCALE."""
    from labkit.numerics import chain_bound
    return chain_bound(reduction_lengths(n_layer, n_embd, n_head, b, s), SCALE)


def reference_blocks(n_layer=2, n_embd=64, n_head=4, seed=0) -> nn.Sequential:
    """The single-device model: `n_layer` labkit.toy_models.Block, same weights on every rank."""
    torch.manual_seed(seed)
    cfg = GPTConfig(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=16, block_size=64)
    blocks = nn.Sequential(*(Block(cfg) for _ in range(n_layer)))
    for p in blocks.parameters():            # non-zero biases so that a doubled bias shows
        nn.init.normal_(p, std=0.05) if p.dim() < 2 else None
    return blocks


def batch(b=2, s=16, h=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    # the reference batch, drawn on the CPU generator (same on every rank); callers move it
    return torch.randn(b, s, h, generator=g, device="cpu"), torch.randn(b, s, h, generator=g, device="cpu")


def _local_seq(x, group):
    t, r = dist.get_world_size(group), dist.get_rank(group)
    k = x.shape[1] // t
    return x[:, r * k:(r + 1) * k]


def block_parity(n_layer=2, n_embd=64, n_head=4, b=2, s=16, sequence_parallel=False,
                 impl="ring", group=None, model=None) -> dict:
    """Max |diff| against one device after one forward and backward; `model` may be a callable
    (ref_blocks, group) -> module to test another TP implementation (e.g. DTensor's)."""
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, w = batch(b, s, n_embd)
    tp = model(ref, group) if model else parallelize_blocks(ref, group, sequence_parallel, impl)
    xr = x.clone().requires_grad_()
    yr = ref(xr)
    (yr * w).sum().backward()
    xin = (_local_seq(x, group) if sequence_parallel else x).clone().requires_grad_()
    y = tp(xin)
    y = y.full_tensor() if hasattr(y, "full_tensor") else y
    want_y = _local_seq(yr, group) if sequence_parallel else yr
    (y * (_local_seq(w, group) if sequence_parallel else w)).sum().backward()
    if sequence_parallel and not model:
        sync_sequence_parallel_grads(tp, group)
    want_gx = _local_seq(xr.grad, group) if sequence_parallel else xr.grad
    out = {"output": (y - want_y).abs().max().item(), "input grad": (xin.grad - want_gx).abs().max().item()}
    full = dict(ref.named_parameters())
    for name, p in tp.named_parameters():
        g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        ref_name = name.replace("attn.", "").replace("mlp.", "")
        out[name] = (g - full_grad_slice(tp, name, full[ref_name].grad)).abs().max().item()
    return out


def block_traffic(n_layer=1, n_embd=256, n_head=4, b=4, s=64, sequence_parallel=False,
                  impl="ring", group=None) -> dict:
    """Bytes this rank sent in one forward and one backward of TP blocks, with the formula:
    per block 2 all-reduces (or reduce-scatter + all-gather pairs) each way of b s h values;
    with sequence parallelism backward also all-gathers the input of each column-parallel
    layer again (2 per block, (t-1)/t x b s h each: "extra backward")."""
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, w = batch(b, s, n_embd)
    tp = parallelize_blocks(ref, group, sequence_parallel, impl)
    xin = (_local_seq(x, group) if sequence_parallel else x).clone().requires_grad_()
    wl = _local_seq(w, group) if sequence_parallel else w
    tp(xin)                                   # warm-up: first calls set up gloo's buffers
    with traffic.measure(sync=True, group=group) as fwd:
        y = tp(xin)
    loss = (y * wl).sum()
    with traffic.measure(sync=True, group=group) as bwd:
        loss.backward()
    t = dist.get_world_size(group)
    act = b * s * n_embd * 4
    return {"forward": fwd.sent, "backward": bwd.sent,
            "formula each way": n_layer * 2 * 2 * (t - 1) / t * act, "activation bytes": act,
            "extra backward": n_layer * 2 * (t - 1) / t * act if sequence_parallel else 0.0,
            "calls each way": 2 * n_layer}


def saved_activation_bytes(n_layer=2, n_embd=256, n_head=4, b=4, s=64, sequence_parallel=False,
                           group=None, attention: str = "sdpa") -> int:
    """Bytes of the distinct tensors autograd saves for backward in one forward (storages
    counted once; parameters excluded). attention="sdpa": torch's fused kernel, which keeps no
    s x s scores (Korthikanti's selective recomputation); "math": softmax(q k^T) v with the
    scores kept (their formula without recomputation)."""
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, _ = batch(b, s, n_embd)
    tp = parallelize_blocks(ref, group, sequence_parallel)
    if attention == "math":
        from labkit.toy_models import math_core
        for blk in tp:
            blk.attn.core = math_core
    elif attention != "sdpa":
        raise ValueError(f"attention must be 'sdpa' or 'math', got {attention!r}")
    xin = (_local_seq(x, group) if sequence_parallel else x).clone().requires_grad_()
    with trace.saved_bytes(exclude=tp.parameters(), per="storage") as saved:       # each storage once
        tp(xin)
    return saved.bytes


def activation_formula(n_layer=2, n_embd=256, n_head=4, b=4, s=64, sequence_parallel=False,
                       t=None, attention: str = "sdpa") -> float:
    """Korthikanti et al.'s bytes for the blocks `saved_activation_bytes` measures (float32,
    no dropout; sdpa = selective recomputation: no attention scores kept)."""
    from labkit.memory.activations import per_layer
    t = t or dist.get_world_size()
    return n_layer * per_layer(s, b, n_embd, n_head, tp=t, sequence_parallel=sequence_parallel,
                               checkpointing="selective" if attention == "sdpa" else "none",
                               bytes_per_value=4, dropout=False)


# Derived, not tuned (labkit.numerics.chain_bound), as `tolerance` above: the
# reductions along one forward and backward, each summed in another order on the ranks (split
# over the vocabulary, heads and columns, then the all-reduces) than on one device. SCALE (16,
# above) bounds every value compared: tests/tp/test_tp_vocab.py checks it on one process
# (the LM's loss, logits and gradients reach 4.3; the random logits of the two loss checks 5.0).
def vocab_tolerance(vocab=64, n_embd=32, n_head=4, b=2, s=8) -> float:
    """The most `vocab_parity`'s differences may be on any CPU (fp32): the block's chain
    (labkit.tp.parity.reduction_lengths), then the head (n_embd), the log-sum-exp over the
    vocabulary (+ the target logit), the mean over b s tokens; backward the head's transpose
    (vocab) and the weight gradients' sums over b s tokens."""
    from labkit.numerics import chain_bound
    return chain_bound(reduction_lengths(1, n_embd, n_head, b, s)
                       + [n_embd, vocab + 1, b * s, vocab, b * s], SCALE)


def loss_tolerance(tokens_: int, vocab: int) -> float:
    """The most a vocabulary-parallel cross-entropy (its loss or its logits' gradient) may differ
    from one device's: the log-sum-exp over `vocab` (+ the target logit) and the mean over
    `tokens_` positions (chain_bound, SCALE as above)."""
    from labkit.numerics import chain_bound
    return chain_bound([vocab + 1, tokens_ + 1], SCALE)


def reference_lm(vocab=64, n_embd=32, n_head=4, seed=0) -> nn.ModuleDict:
    """Embedding -> one labkit Block -> output head (no bias), same weights on every rank."""
    blocks = reference_blocks(1, n_embd, n_head, seed)
    torch.manual_seed(seed + 1)
    return nn.ModuleDict({"emb": nn.Embedding(vocab, n_embd), "block": blocks[0],
                          "head": nn.Linear(n_embd, vocab, bias=False)})


def tokens(b=2, s=8, vocab=64, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (b, s), generator=g).to(labkit.device()), torch.randint(0, vocab, (b, s), generator=g).to(labkit.device())


def _reference(ref, ids, tgt):
    logits = ref["head"](ref["block"](ref["emb"](ids)))
    loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
    loss.backward()
    return loss, logits


def _parallel(ref, group):
    return nn.ModuleDict({"emb": VocabParallelEmbedding(ref["emb"], group),
                          "block": TPBlock(ref["block"], group),
                          "head": ColumnParallelLinear(ref["head"], group, name="vocabulary size")})


def vocab_parity(vocab=64, n_embd=32, n_head=4, b=2, s=8, group=None) -> dict:
    """Max |diff| against one device after one forward and backward: the loss, the embedding's
    and the head's gradient (this rank's rows) and the block's."""
    ref = reference_lm(vocab, n_embd, n_head)
    ids, tgt = tokens(b, s, vocab)
    tp = _parallel(ref, group)
    loss_ref, _ = _reference(ref, ids, tgt)
    logits = tp["head"](tp["block"](tp["emb"](ids)))
    loss = vocab_parallel_cross_entropy(logits, tgt, group).mean()
    loss.backward()
    rows = slice(tp["emb"].start, tp["emb"].end)
    out = {"loss": (loss - loss_ref).abs().item(),
           "embedding grad": (tp["emb"].weight.grad - ref["emb"].weight.grad[rows]).abs().max().item(),
           "head grad": (tp["head"].weight.grad - ref["head"].weight.grad[rows]).abs().max().item()}
    full = dict(ref["block"].named_parameters())
    for name, p in tp["block"].named_parameters():
        want = full_grad_slice(tp["block"], name, full[name.replace("attn.", "").replace("mlp.", "")].grad)
        out["block." + name] = (p.grad - want).abs().max().item()
    out["vocab rows"] = (rows.start, rows.stop)
    return out


def torch_loss_parallel(tokens_=64, vocab=256) -> dict:
    """torch's `loss_parallel` (DTensor, logits Shard(-1) on a 1-D mesh) beside labkit's:
    the loss and the logits' gradient against one device, and the collectives torch's
    CommDebugMode counts in forward and backward (no all-gather of the logits)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel
    t, r = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu" if dist.get_backend() == "gloo" else "cuda", (t,))
    g = torch.Generator().manual_seed(4)
    full = torch.randn(tokens_, vocab, generator=g).to(labkit.device())
    tgt = torch.randint(0, vocab, (tokens_,), generator=g).to(labkit.device())
    ref = full.clone().requires_grad_()
    F.cross_entropy(ref, tgt).backward()
    k = vocab // t
    local = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    dt = DTensor.from_local(local, mesh, [Shard(1)])
    with CommDebugMode() as cm, loss_parallel():
        loss = F.cross_entropy(dt, tgt)
        loss.backward()
    counts = {str(k).split(".")[-1]: int(v) for k, v in cm.get_comm_counts().items()}
    mine = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    ours = vocab_parallel_cross_entropy(mine, tgt).mean()
    ours.backward()
    want = ref.grad[:, r * k:(r + 1) * k]
    return {"torch loss diff": (loss.full_tensor() - F.cross_entropy(full, tgt)).abs().item(),
            "torch grad diff": (local.grad - want).abs().max().item(),
            "labkit loss diff": (ours - F.cross_entropy(full, tgt)).abs().item(),
            "labkit grad diff": (mine.grad - want).abs().max().item(),
            "torch collectives": counts}
