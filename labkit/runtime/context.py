"""Where am I? The same answers inside a labkit rank, under torchrun, and in a plain process.

    labkit.rank(), labkit.world_size(), labkit.device(), labkit.emit(step=3, loss=0.5)

Inside a Cluster the worker sets these when it joins the process group (the rank's own
connection to the notebook is channel.py's). Under torchrun they
come from RANK / WORLD_SIZE / LOCAL_RANK, so an exercise runs unchanged on a real multi-node
job (call `labkit.init_process_group()` once there). Anywhere else: rank 0 of 1.
"""
import os
import time

_worker = None          # (rank, world_size, device, backend, channel.Channel) inside a labkit rank


def _set_worker(rank, world_size, device, backend, conn) -> None:
    global _worker
    _worker = (rank, world_size, device, backend, conn)


def control_fd() -> int:
    """File descriptor of this rank's control connection to the notebook, -1 outside a rank
    (traffic counters leave it out: it is labkit's own, not the process group's)."""
    if _worker is None:
        return -1
    try:
        return _worker[4].fileno()
    except (OSError, AttributeError, ValueError):
        return -1


def in_cluster() -> bool:
    """True inside a labkit Cluster rank."""
    return _worker is not None


def rank() -> int:
    """This process's global rank (0 outside any distributed job)."""
    if _worker is not None:
        return _worker[0]
    return int(os.environ.get("RANK", 0))


def world_size() -> int:
    """Number of ranks in the job (1 outside any distributed job)."""
    if _worker is not None:
        return _worker[1]
    return int(os.environ.get("WORLD_SIZE", 1))


def local_rank() -> int:
    if _worker is not None:                      # one node: local rank == rank (remote: torchrun's)
        return int(os.environ.get("LOCAL_RANK", _worker[0]))
    return int(os.environ.get("LOCAL_RANK", 0))


def device():
    """The torch.device this rank computes on: cuda:<local rank> with NCCL, else cpu."""
    import torch
    if _worker is not None:
        return _worker[2]
    if "LOCAL_RANK" in os.environ and torch.cuda.is_available():
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


def backend() -> str:
    if _worker is not None:
        return _worker[3]
    import torch
    return "nccl" if torch.cuda.is_available() else "gloo"


def emit(**fields) -> None:
    """Send an event (numbers, short strings) to the notebook while the run is going.

    The notebook receives ``(rank, time, fields)`` in `cluster.events` and in callbacks
    registered with `cluster.on_event`; live plots and progress bars are drawn from them.
    Outside a Cluster (torchrun, plain Python) events are dropped.
    """
    if _worker is not None:                       # the channel knows the task and its cap
        _worker[4].send_event(_worker[0], time.time(), fields)


def init_process_group(backend: str = "auto", **kwargs):
    """Join the process group torchrun describes (no-op inside a Cluster or if already joined).

    backend="auto" is NCCL with `set_device(LOCAL_RANK)` when there is a GPU, else gloo.
    """
    import torch
    import torch.distributed as dist
    if _worker is not None or dist.is_initialized():
        return
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend, **kwargs)
