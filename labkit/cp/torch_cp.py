"""Run on every rank: PyTorch's own context parallelism
(`torch.distributed.tensor.experimental.context_parallel`) on the same q, k, v as labkit's, and
whether torch's CP was engaged at all: how many times its ring (`_templated_ring_attention`)
was called inside the `context_parallel` block.

    cluster.run(labkit.cp.torch_cp.try_torch_cp, causal=True)
    # -> {"ring calls": 0, "max diff": ...} or {"ring calls": 0, "error": "..."}

What torch 2.13 does (read in torch/distributed/tensor/experimental/_context_parallel/_attention.py):
- its handlers are registered for the CUDA attention ops only
  (aten._scaled_dot_product_{flash,efficient,cudnn}_attention and their backwards), not for
  aten._scaled_dot_product_flash_attention_for_cpu; on CPU `_templated_ring_attention` is never
  called, for either mask. Measured here, 4 gloo ranks: no mask: 0 ring calls (DTensor computes
  the attention some other way and the gathered output still matches one process); causal: 0 ring
  calls, it stops with "Operator aten._scaled_dot_product_flash_attention_for_cpu.default does
  not have a sharding strategy registered.";
- a non-causal call with load balancing on (`_cp_options.enable_load_balance`, the default)
  would raise "Load balancing requires `is_causal=True`." inside `_templated_ring_attention`;
- the default rotate method is all-gather (`_ContextParallelOptions.rotate_method`);
  `set_rotate_method("alltoall")` passes K/V round the ring; dK/dV always travel by all-to-all
  (`dkv_rotater`), accumulated in float32 (`accum_dtype`, `convert_to_f32=True`); the causal
  path shards the buffers head-tail (`_HeadTailLoadBalancer`), the zig-zag of section 5.
So the comparison with labkit's ring waits for a GPU; no timing is taken here.
"""
import traceback


def try_torch_cp(causal: bool = True, rotate: str = "allgather", seq: int = 16, heads: int = 2,
                 head_dim: int = 8) -> dict:
    """torch's context_parallel on this rank's part: {"ring calls": how many times torch's
    `_templated_ring_attention` ran, "max diff": gathered output against one process} or
    {"ring calls": ..., "error": the exception's last line}."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import (context_parallel_unshard,
                                                                  set_rotate_method)
    from torch.distributed.tensor.experimental._context_parallel import _attention as tca
    from labkit.cp.api import reference
    from labkit.cp.parity import qkv
    q, k, v = qkv(1, heads, None, seq, head_dim)
    want = reference(q, k, v, causal=causal)
    real, calls = tca._templated_ring_attention, [0]

    def counted(*a, **kw):
        calls[0] += 1
        return real(*a, **kw)
    tca._templated_ring_attention = counted        # the CUDA handlers look it up here, by name
    try:
        set_rotate_method(rotate)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        bufs = [t.clone() for t in (q, k, v)]
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
            out = F.scaled_dot_product_attention(*bufs, is_causal=causal)
            full, = context_parallel_unshard(mesh, [out], [2])
        return {"ring calls": calls[0], "max diff": (full - want).abs().max().item()}
    except Exception as exc:          # noqa: BLE001 - what fails is the finding
        return {"ring calls": calls[0], "error": traceback.format_exception_only(exc)[-1].strip()}
    finally:
        tca._templated_ring_attention = real


def torch_cp_facts() -> dict:
    """What this torch's context parallelism is set up to do, read from its module (one process,
    no ranks): the attention ops it handles, whether the CPU kernel is among them, whether each
    handler calls `_templated_ring_attention` by its module name (so `try_torch_cp`'s count
    would see it), and its default options."""
    import torch
    from torch.distributed.tensor.experimental._context_parallel import _attention as tca
    aten = torch.ops.aten
    ring = [tca._scaled_dot_product_ring_flash_attention, tca._scaled_dot_product_ring_efficient_attention,
            tca._scaled_dot_product_ring_cudnn_attention]
    return {"handled ops": sorted(str(op) for op in tca.custom_ops),
            "cpu kernel handled": aten._scaled_dot_product_flash_attention_for_cpu.default in tca.custom_ops,
            "handlers call the ring by name": all("_templated_ring_attention" in f.__code__.co_names for f in ring),
            "rotate method": tca._cp_options.rotate_method.name,
            "gradients in fp32": tca._cp_options.convert_to_f32,
            "load balancing": tca._cp_options.enable_load_balance}
