"""Where am I? The same answers inside a labkit rank, under torchrun, and in a plain process.

    labkit.rank(), labkit.world_size(), labkit.device(), labkit.emit(step=3, loss=0.5)

Inside a Cluster the worker sets these when it joins the process group. Under torchrun they
come from RANK / WORLD_SIZE / LOCAL_RANK, so an exercise runs unchanged on a real multi-node
job (call `labkit.init_process_group()` once there). Anywhere else: rank 0 of 1.
"""
import os
import threading
import time

_worker = None          # (rank, world_size, device, backend, conn) inside a labkit rank
_task_id = None         # the task the rank is running now, for emit()
EVENT_LIMITS = (10_000, 10_000_000)   # events, pickled bytes per rank per run: Cluster's defaults
_events = None          # [count, bytes, dropped, limits] of the running task


def new_task(task_id, limits=None) -> None:
    """On a rank: a task starts (None: it ended); its events are counted from zero."""
    global _task_id, _events
    _task_id = task_id
    _events = [0, 0, 0, tuple(limits or EVENT_LIMITS)]


def events_dropped() -> int:
    return _events[2] if _events else 0


class Channel:
    """A rank's control connection to the notebook, safe to send on from many threads.

    multiprocessing's Connection writes a message in several system calls (header, then body),
    so two threads sending at once interleave bytes and the notebook cannot decode either
    message. Every send of a rank (results, events, init replies) goes through one lock.
    A process forked from the rank (os.fork, a multiprocessing child) must never write here:
    its sends are dropped, so it can neither garble the stream nor answer for the rank."""

    def __init__(self, conn):
        self.conn = conn
        self.pid = os.getpid()
        self._lock = threading.Lock()

    def send(self, msg) -> None:
        if os.getpid() != self.pid:
            return
        with self._lock:
            self.conn.send(msg)

    def send_event(self, msg) -> None:
        """An event, unless this task already sent as many events or bytes as it may: then
        it is counted as dropped (the notebook says how many), and the notebook's memory
        stays bounded however fast a rank emits."""
        import pickle
        ev = _events
        if ev is None or os.getpid() != self.pid:
            return
        if ev[0] >= ev[3][0]:
            ev[2] += 1
            return
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        if ev[1] + len(data) > ev[3][1]:
            ev[2] += 1
            return
        ev[0] += 1
        ev[1] += len(data)
        with self._lock:
            self.conn.send_bytes(data)

    def recv(self):
        return self.conn.recv()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.conn.poll(timeout)

    def fileno(self) -> int:
        return self.conn.fileno()


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
    if _worker is None or _task_id is None:
        return
    import pickle
    from labkit.runtime.protocol import Event
    # each field pickled on its own: a value the notebook cannot unpickle (a class only the
    # ranks can import) loses that event, named, not the whole connection (collect.py)
    data = {k: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) for k, v in fields.items()}
    _worker[4].send_event(Event(_task_id, _worker[0], time.time(), data))


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
