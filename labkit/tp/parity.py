"""Run on every rank: tensor-parallel blocks against the same blocks on one device.

    cluster.run(block_parity, sequence_parallel=False)  # -> per rank: max |diff| of output,
                                                         #    input grad and every parameter grad
    cluster.run(block_traffic)                          # bytes per forward / backward, vs formula
"""
import torch
import torch.distributed as dist
import torch.nn as nn

from labkit.comm import traffic
from labkit.models import Block, GPTConfig
from labkit.tp.blocks import full_grad_slice, parallelize_blocks, sync_sequence_parallel_grads


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
    """The single-device model: `n_layer` labkit.models.Block, same weights on every rank."""
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
        from labkit.tricks.checkpointing import math_core
        for blk in tp:
            blk.attn.core = math_core
    elif attention != "sdpa":
        raise ValueError(f"attention must be 'sdpa' or 'math', got {attention!r}")
    params = {p.untyped_storage().data_ptr() for p in tp.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    xin = (_local_seq(x, group) if sequence_parallel else x).clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        tp(xin)
    return sum(seen.values())


def activation_formula(n_layer=2, n_embd=256, n_head=4, b=4, s=64, sequence_parallel=False,
                       t=None, attention: str = "sdpa") -> float:
    """Korthikanti et al.'s bytes for the blocks `saved_activation_bytes` measures (float32,
    no dropout; sdpa = selective recomputation: no attention scores kept)."""
    from labkit.memory.activations import per_layer
    t = t or dist.get_world_size()
    return n_layer * per_layer(s, b, n_embd, n_head, tp=t, sequence_parallel=sequence_parallel,
                               checkpointing="selective" if attention == "sdpa" else "none",
                               bytes_per_value=4, dropout=False)
