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
    return torch.randn(b, s, h, generator=g), torch.randn(b, s, h, generator=g)


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
    per block 2 all-reduces (or reduce-scatter + all-gather pairs) each way of b s h values."""
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
            "calls each way": 2 * n_layer}


def saved_activation_bytes(n_layer=2, n_embd=256, n_head=4, b=4, s=64, sequence_parallel=False,
                           group=None) -> int:
    """Bytes of the distinct tensors autograd saves for backward in one forward (storages
    counted once; parameters excluded)."""
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, _ = batch(b, s, n_embd)
    tp = parallelize_blocks(ref, group, sequence_parallel)
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
