"""`labkit.cp.attention`: attention on a sequence sharded over a process group, applied from
outside to a model written for one device (its q, k, v after the projections go in, this
rank's part of the output comes out, differentiable)."""
import torch

from labkit.cp.allgather import AllGatherAttention
from labkit.cp.blocks import merge
from labkit.cp.ring import RingAttention
from labkit.cp.shard import agree


def attention(q, k, v, *, group=None, causal: bool = False, method: str = "ring",
              layout: str = "contiguous", attn_mask=None, merge_fn=merge):
    """This rank's part of softmax(q k^T / sqrt(d)) v, for q, k, v shaped (batch, heads, seq,
    head_dim) holding this rank's positions (`shard_sequence` with the same layout). k and v may
    have fewer heads than q (grouped-query attention). `merge_fn` replaces the online-softmax
    merge (the exercise plugs the learner's in)."""
    import torch.distributed as dist
    if attn_mask is not None:
        raise ValueError(f"rank {dist.get_rank(group)}: context-parallel attention takes causal=True "
                         f"or causal=False, not an attn_mask tensor: each rank sees only its block "
                         f"of the mask. Express the mask as causal, or run attention on one device")
    seq = agree(q, k, v, group=group, causal=causal, method=method, layout=layout)
    fn = RingAttention if method == "ring" else AllGatherAttention
    return fn.apply(q, k.contiguous(), v.contiguous(), group, bool(causal), layout, seq, merge_fn)


def reference(q, k, v, causal: bool = False):
    """The same attention on one process on the full sequence (torch's sdpa)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
