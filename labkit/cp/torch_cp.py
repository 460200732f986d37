"""Run on every rank: PyTorch's own context parallelism
(`torch.distributed.tensor.experimental.context_parallel`) on the same q, k, v as labkit's,
or the exact error it stops with on this machine.

    cluster.run(labkit.cp.torch_cp.try_torch_cp, causal=True)   # -> {"max diff", "seconds"} or {"error"}

torch 2.13's context_parallel shards the buffers along the sequence (its own load-balanced
layout for causal masks) and replaces scaled_dot_product_attention inside the block with a ring
(rotate method "allgather" or "alltoall"). Measured on gloo CPU ranks, torch 2.13.0+cpu: without a causal mask it
runs and matches one process (max |diff| ~2e-7, both rotate methods); with is_causal=True the
default CPU kernel stops with "Operator aten._scaled_dot_product_flash_attention_for_cpu.default
does not have a sharding strategy registered.", and forcing the math kernel with "aten.add.Tensor
got mixed torch.Tensor and DTensor".
"""
import time
import traceback


def _labkit_seconds(q, k, v, causal, repeats):
    import torch.distributed as dist
    from labkit.cp.api import attention
    from labkit.cp.shard import shard_sequence
    parts = [shard_sequence(t, 2) for t in (q, k, v)]
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        attention(*parts, causal=causal, method="ring")
        times.append(time.perf_counter() - t0)
    return min(times)


def try_torch_cp(causal: bool = True, rotate: str = "allgather", seq: int = 16, heads: int = 2,
                 head_dim: int = 8, repeats: int = 3) -> dict:
    """torch's context_parallel on this rank's part: max |diff| of the gathered output against one
    process and the forward's seconds (best of `repeats`) beside labkit's ring on the same
    input; or {"error": the exception's last line}."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import (context_parallel_unshard,
                                                                  set_rotate_method)
    from labkit.cp.api import reference
    from labkit.cp.parity import qkv
    q, k, v = qkv(1, heads, None, seq, head_dim)
    want = reference(q, k, v, causal=causal)
    try:
        set_rotate_method(rotate)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        times = []
        for _ in range(repeats):
            bufs = [t.clone() for t in (q, k, v)]
            with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
                dist.barrier()
                t0 = time.perf_counter()
                out = F.scaled_dot_product_attention(*bufs, is_causal=causal)
                times.append(time.perf_counter() - t0)
                full, = context_parallel_unshard(mesh, [out], [2])
        mine = _labkit_seconds(q, k, v, causal, repeats)
        return {"max diff": (full - want).abs().max().item(), "torch seconds": min(times),
                "labkit seconds": mine}
    except Exception as exc:          # noqa: BLE001 - what fails is the finding
        return {"error": traceback.format_exception_only(exc)[-1].strip()}
