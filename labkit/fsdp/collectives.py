"""The collectives FSDP2 calls when labkit shards a model (labkit.fsdp.shard(log=True)): the same
all-gather and reduce-scatter, measured from outside FSDP's algorithm through labkit/trace.py.

    log = install(model, ring=False)      # every FSDPModule of the model calls these from now on
    log.records                           # [{kind, bytes, ranks, unit, t0, t1}], one per call

Each call is a span of the model's `CommLog` (a labkit.trace.Recorder on perf_counter, this
rank's clock) with its bytes (the full tensor), ranks and unit; `labkit.fsdp.comm_log(model)`
reads them. ring=True runs the reduce-scatter as labkit's ring (module 02): on gloo the bytes
are the (N-1)/N that NCCL would send, not gloo's all-reduce-sized 2(N-1)/N.
"""
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule
# The comm interfaces FSDP2 accepts for custom collectives (private module, torch 2.8-2.13).
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from labkit import trace
from labkit.comm.compat import all_gather_into_tensor, reduce_scatter_tensor


class CommLog(trace.Recorder):
    """A recorder whose spans land in `records` as FSDP's comm log: dicts with kind, bytes,
    ranks, unit, t0, t1 (time.perf_counter on this rank)."""

    def __init__(self):
        super().__init__()
        self.records = []

    def add_span(self, name, t0, t1, tags) -> None:
        self.records.append({"kind": name, **tags, "t0": t0, "t1": t1})


def install(model: nn.Module, ring: bool = False) -> CommLog:
    """Give every FSDPModule of `model` labkit's all-gather and reduce-scatter, logged into one
    CommLog (returned)."""
    log = CommLog()
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            m.set_custom_all_gather(_AllGather(log, name or "(root)"))
            m.set_custom_reduce_scatter(_ReduceScatter(log, ring, name or "(root)"))
    return log


def _refs(t: torch.Tensor) -> int:
    """References to `t`'s storage (tensors, views, and a collective's own while it holds one)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _released(before: dict, limit_s: float = 0.1) -> None:
    """Return once a collective has let go of its tensors ({tensor: references before it}).
    gloo says a collective is done from its worker thread and drops that thread's references a
    moment later, so when FSDP then freed a buffer (its storage really freed only at the last
    reference) depended on thread timing: the measured peak of a choice moved from run to run
    (block, full, bf16, offload: 561,156 B or 620,452 B on a rank, 59 kB of temporaries alive or
    not; never in 64 runs with this wait). NCCL's references live on a stream, not a thread:
    there this returns at once."""
    deadline = time.perf_counter() + limit_s
    while any(_refs(t) > n for t, n in before.items()) and time.perf_counter() < deadline:
        time.sleep(0)


class _Alloc:
    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)


class _AllGather(_Alloc, AllGather):
    def __init__(self, log, unit: str = ""):
        self.log, self.unit = log, unit

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        with self.log.span("all_gather", bytes=output_tensor.numel() * output_tensor.element_size(),
                           ranks=dist.get_world_size(group), unit=self.unit):
            before = {t: _refs(t) for t in (input_tensor, output_tensor)}
            all_gather_into_tensor(output_tensor, input_tensor, group=group)
            _released(before)
        return None


class _ReduceScatter(_Alloc, ReduceScatter):
    def __init__(self, log, ring: bool, unit: str = ""):
        self.log, self.ring, self.unit = log, ring, unit

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        with self.log.span("reduce_scatter", bytes=input_tensor.numel() * input_tensor.element_size(),
                           ranks=dist.get_world_size(group), unit=self.unit):
            self._reduce_scatter(output_tensor, input_tensor, group, op)
        return None

    def _reduce_scatter(self, output_tensor, input_tensor, group, op):
        if self.ring:
            from labkit.comm import ring_reduce_scatter
            out = ring_reduce_scatter(input_tensor, group=group)     # a sum, as a view
            if op == dist.ReduceOp.AVG:
                out = out / dist.get_world_size(group)
            elif op != dist.ReduceOp.SUM:
                raise NotImplementedError(f"labkit's ring reduce-scatter does sum and average, not {op}")
            output_tensor.copy_(out)
        else:
            before = {t: _refs(t) for t in (input_tensor, output_tensor)}
            reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group)
            _released(before)
