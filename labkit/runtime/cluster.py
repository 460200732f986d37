"""`labkit.Cluster`: a persistent pool of real torch.distributed ranks driven from a notebook.

    cluster = labkit.Cluster(world_size=4)          # gloo on CPU, or NCCL with a GPU per rank
    cluster.run(fn, *args, timeout=None, **kwargs)  # -> [result of rank 0, rank 1, ...]

The ranks start once and wait for work; `run` sends `fn` by value to every rank, streams each
rank's prints into the cell as ``[rank N] ...`` and returns the results by rank. Failures come
back as `RankError` (a traceback per rank) and hangs as `RankTimeout` (where each rank was
stuck). After a hang, a crash or an interrupt the ranks are replaced by spares that have
already imported torch, and new spares are forked from a zygote (a process that imported
torch once) in ~0.1 s, so the next `run` works within a second, failure after failure.
Tensors in arguments, `push`, `pull` and results travel through shared memory (shm.py);
every task carries the notebook's folder, sys.path and edited modules (learner.py).
"""
import datetime
import itertools
import os
import sys
import threading
import time
import weakref

from labkit.runtime import errors, learner, procs, shm, wire
from labkit.runtime.collect import Event, collect
from labkit.runtime.pool import WorkerPool, shutdown

_current = None        # weakref to the newest open Cluster, for %%ranks
_open = weakref.WeakSet()   # every open Cluster of this process, for close_all()


def current():
    """The newest open Cluster, or None."""
    c = _current() if _current is not None else None
    return c if c is not None and not c.closed else None


def close_all() -> int:
    """Close every open Cluster of this process (e.g. ones only IPython's Out[] still holds)."""
    clusters = list(_open)
    for c in clusters:
        c.close()
    return len(clusters)


def _resolve_backend(backend: str, world_size: int) -> str:
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "auto":
        return "nccl" if gpus >= world_size else "gloo"
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"backend='nccl' needs one GPU per rank: world_size={world_size} but this "
                         f"machine has {gpus} GPU(s) visible (torch.cuda.device_count()). Use "
                         f"backend='gloo' (CPU) or world_size<={gpus}.")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend must be 'auto', 'gloo' or 'nccl', got {backend!r}")
    return backend


class Cluster:
    """A pool of `world_size` ranks. See the module docstring; docs/architecture.md has how a run flows."""

    def __init__(self, world_size: int = 4, backend: str = "auto", *, timeout: float = 120.0,
                 spares: int = None, start_timeout: float = 120.0):
        """timeout: default seconds a run may take before RankTimeout (the process group's own
        timeout is max(600 s, 2 x this), so labkit, not gloo/NCCL, reports a hang first).
        spares: standby workers kept ready for recovery (default: world_size). Workers are
        forked from the cluster's zygote (LABKIT_ZYGOTE=0: spawned interpreters instead)."""
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a whole number of ranks >= 1, got {world_size!r}")
        import torch.distributed as dist
        self.world_size = world_size
        self.backend = _resolve_backend(backend, world_size)
        self.device_type = "cuda" if self.backend == "nccl" else "cpu"
        self.timeout = float(timeout)
        self.threads_per_rank = procs.fair_threads(world_size)
        self.events = []                          # Event(rank, time, data) of the last run
        self._callbacks = []
        self._pool = WorkerPool(self.threads_per_rank, world_size if spares is None else int(spares))
        self._ranks = []                          # Worker by rank
        self._needs_restart = False
        self._closed = False
        self._gen = 0
        self._task_ids = itertools.count(1)
        self._run_lock = threading.Lock()
        # The rendezvous store listens on a loopback socket we bind (TCPStore's own port=0 would
        # listen on every interface). TCPStore takes the fd over and closes it when destroyed,
        # so the Python socket object lets go of it (closing it twice closed a later socket).
        sock = procs.loopback_listen_socket()
        self._store_address = sock.getsockname()
        self._store_port = self._store_address[1]
        self._store = [dist.TCPStore("127.0.0.1", self._store_port, None, True,
                                     timeout=datetime.timedelta(seconds=start_timeout),
                                     wait_for_workers=False, master_listen_fd=sock.detach(),
                                     use_libuv=True)]
        self._finalizer = weakref.finalize(self, shutdown, self._pool, self._store)
        t0 = time.perf_counter()
        try:
            self._promote(start_timeout)
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.perf_counter() - t0
        global _current
        _current = weakref.ref(self)
        others = [c for c in _open if not c.closed]
        if others:
            procs_held = sum(len(c._pool.workers) for c in others)
            print(f"labkit: {len(others)} other cluster(s) still open in this kernel, holding "
                  f"{procs_held} processes; close them with .close() or labkit.close_all() if "
                  "you no longer need them.", file=sys.stderr)
        _open.add(self)
        from labkit.runtime.magic import install_traceback_filter
        install_traceback_filter()
        self._pool.top_up()

    def _promote(self, timeout: float) -> None:
        """Turn `world_size` spares into ranks 0..n-1 of a fresh process group."""
        deadline = time.monotonic() + timeout
        ranks = self._pool.take(self.world_size, deadline)
        self._gen += 1
        sys_path = [p or os.getcwd() for p in sys.path]
        for r, w in enumerate(ranks):
            w.rank = r
            w.conn.send(("init", {
                "rank": r, "world_size": self.world_size, "backend": self.backend,
                "store_host": "127.0.0.1", "store_port": self._store_port,
                "prefix": f"labkit/{self._gen}/", "threads": self.threads_per_rank,
                "pg_timeout": max(600.0, 2 * self.timeout), "sys_path": sys_path}))
        self._ranks = ranks
        waiting = set(range(self.world_size))
        while waiting:
            for r in list(waiting):
                w = ranks[r]
                self._print_lines(w, w.read_lines())
                try:
                    if not w.conn.poll(0.01):
                        continue
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    self._kill_ranks()
                    raise RuntimeError(f"rank {r} {w.how_it_died()} while joining the process group")
                if msg[0] == "init_failed":
                    self._kill_ranks()
                    f = errors.failure_from_report(r, msg[1])
                    raise RuntimeError(f"rank {r} could not join the process group: {f.type}: "
                                       f"{f.message}\n{f.traceback}")
                waiting.discard(r)
            if waiting and time.monotonic() > deadline:
                self._kill_ranks()
                raise TimeoutError(f"ranks {sorted(waiting)} did not join the process group in time")
        self._needs_restart = False

    def _kill_ranks(self) -> None:
        for w in self._ranks:
            w.kill()
        for w in self._ranks:
            w.reap(1.0)
            self._print_lines(w, w.read_lines(final=True))
            self._pool.forget(w)
        self._ranks = []
        self._needs_restart = True

    # -- running work ---------------------------------------------------------------------
    def run(self, fn, *args, timeout: float = None, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results, index = rank."""
        __tracebackhide__ = True
        self._check_open()
        segments = []                             # tensors go through shared memory (shm.py)
        try:
            payload = wire.dumps_call(fn, args, kwargs, keep=segments)
            return self._execute("call", payload, timeout, f"{getattr(fn, '__name__', 'fn')}()")
        finally:
            shm.close(segments)

    def push(self, **values) -> None:
        """Set variables in every rank's %%ranks namespace: ``cluster.push(lr=0.1)``."""
        __tracebackhide__ = True
        self._check_open()
        segments = []
        try:
            self._execute("push", wire.dumps_values(values, keep=segments), None, "push")
        finally:
            shm.close(segments)

    def pull(self, name: str) -> list:
        """A variable from every rank's %%ranks namespace, as a list by rank."""
        __tracebackhide__ = True
        self._check_open()
        return self._execute("pull", name, None, f"pull({name!r})")

    def exec_cell(self, source: str, filename: str, timeout: float = None) -> list:
        """Run notebook source on every rank in its persistent namespace (for %%ranks)."""
        __tracebackhide__ = True
        self._check_open()
        return self._execute("exec", (source, filename), timeout, "the %%ranks cell")

    def on_event(self, callback):
        """Call ``callback(Event(rank, time, data))`` for each `labkit.emit` during runs.
        Returns a function that unsubscribes."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def _execute(self, kind: str, payload, timeout, label: str) -> list:
        __tracebackhide__ = True
        with self._run_lock:
            try:
                if self._needs_restart:
                    self._promote(120.0)
                    self._pool.top_up()
                for w in self._ranks:
                    self._print_lines(w, w.read_lines())
                task_id = next(self._task_ids)
                self.events = []
                timeout = self.timeout if timeout is None else float(timeout)
                where = learner.snapshot()         # the notebook's folder, sys.path, modules
                try:
                    for w in self._ranks:
                        w.conn.send(("task", task_id, kind, payload, where))
                except (BrokenPipeError, OSError):
                    pass                           # a dead rank shows up as EOF below
                outcome = collect(self, task_id, timeout)
                for w in self._ranks:              # results are loaded: ranks free their copies
                    try:
                        w.conn.send(("release", task_id))
                    except (BrokenPipeError, OSError):
                        pass
            except KeyboardInterrupt:
                self._kill_ranks()
                self._pool.top_up()
                raise KeyboardInterrupt(f"interrupted: the {self.world_size} ranks were stopped; "
                                        "the next run starts fresh ones") from None
        return outcome.result(self, label, timeout)

    def _print_lines(self, w, lines) -> None:
        if lines:
            sys.stdout.write("".join(f"[rank {w.rank}] {ln}\n" for ln in lines))
            sys.stdout.flush()

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        for cb in list(self._callbacks):
            try:
                cb(event)
            except Exception as exc:              # a broken plot must not leave ranks running
                print(f"labkit: event callback {cb!r} failed: {exc!r}; removed", file=sys.stderr)
                self._callbacks.remove(cb)

    # -- life cycle -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this cluster is closed; start a new one with "
                               "labkit.Cluster(world_size=...)")

    @property
    def closed(self) -> bool:
        return self._closed

    def restart(self) -> None:
        """Replace every rank by a fresh one (namespaces are emptied)."""
        self._check_open()
        with self._run_lock:
            self._kill_ranks()
            self._promote(120.0)
        self._pool.top_up()

    def wait_for_spares(self, timeout: float = 60.0) -> bool:
        """Block until every spare has started (so the next recovery is fast)."""
        return self._pool.wait_for_spares(timeout)

    def close(self) -> None:
        """Stop every rank and spare. Safe to call twice."""
        self._closed = True
        self._ranks = []
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._ranks)} ranks ready, {len(self._pool.spares)} spares"
        return (f"Cluster(world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device_type!r}, threads_per_rank={self.threads_per_rank}; {state})")
