"""A few numbers or strings exchanged between ranks as tensors, never as pickles.

torch's `all_gather_object` and `broadcast_object_list` unpickle what the peer sent, and
unpickling runs whatever the bytes say: a peer that is not the learner's rank (another local
user who took over a gloo connection: docs/teaching.md, the threat model) would run code as the
learner. labkit's own exchanges of small values (a memory breakdown per rank, the seeds of the
checklist, DDP's bucket order) go through these two instead: the value as JSON (numbers,
strings, lists, dicts; tuples come back as lists), its bytes a uint8 tensor, the lengths first.
Decoding JSON runs no code. Tensors on the group's device (CUDA for NCCL), as torch's do.
"""
import json

import torch
import torch.distributed as dist


def _device(group) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _plain(x):
    """A numpy or torch scalar as the Python number it holds (what JSON can write)."""
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"{type(x).__name__} cannot be sent between ranks as JSON")


def _encode(value, device) -> torch.Tensor:
    data = bytearray(json.dumps(value, default=_plain).encode())
    return torch.frombuffer(data, dtype=torch.uint8).to(device)


def _decode(t: torch.Tensor):
    return json.loads(t.cpu().numpy().tobytes().decode())


def all_gather_json(value, group=None) -> list:
    """Every rank's `value` (JSON-able), by rank of `group`: all_gather_object without pickle."""
    device = _device(group)
    mine = _encode(value, device)
    n = dist.get_world_size(group)
    size = torch.tensor([mine.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(n)]
    dist.all_gather(sizes, size, group=group)
    sizes = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(sizes), dtype=torch.uint8, device=device)
    padded[:mine.numel()] = mine
    every = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(every, padded, group=group)
    return [_decode(t[:k]) for t, k in zip(every, sizes)]


def broadcast_json(value, src: int, group=None):
    """`value` (JSON-able) of global rank `src`, on every rank of `group`: broadcast_object_list
    without pickle (other ranks pass anything as `value`)."""
    device = _device(group)
    mine = _encode(value, device) if dist.get_rank() == src else None
    size = torch.tensor([mine.numel() if mine is not None else 0], dtype=torch.int64, device=device)
    dist.broadcast(size, src=src, group=group)
    buf = mine if mine is not None else torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(buf, src=src, group=group)
    return _decode(buf)


__all__ = ["all_gather_json", "broadcast_json"]
