"""`labkit.Cluster`: a persistent pool of real torch.distributed ranks driven from a notebook.

    cluster = labkit.Cluster(world_size=4)          # gloo on CPU, or NCCL with a GPU per rank
    cluster.run(fn, *args, timeout=None, **kwargs)  # -> [result of rank 0, rank 1, ...]

The ranks start once and wait for work; `run` sends `fn` by value to every rank, streams each
rank's prints into the cell as ``[rank N] ...`` and returns the results by rank. Failures come
back as `RankError` (a traceback per rank) and hangs as `RankTimeout` (where each rank was
stuck). After a hang, a crash or an interrupt the ranks are replaced by spares (forked from a
zygote in ~0.1 s, zygote.py), so the next `run` works within a second, failure after failure.

Where ranks come from is the Cluster's *source* (`cluster.source`, source.py): this machine by
default (local/source.py), or torchrun on other machines with `Cluster.remote(...)`
(remote/source.py). The ranks it has taken are one `group.RankGroup` (send a task to all,
release, join, kill all). Everything else (the run loop, recovery, output, errors) is the same
for both sources.
"""
import itertools
import threading
import time
import weakref

from labkit.runtime import errors, interrupts, shm, wire
from labkit.runtime.channel import EVENT_LIMITS
from labkit.runtime.collect import Events
from labkit.runtime.group import RankGroup
from labkit.runtime.kernel import close_all, current, opened   # noqa: F401 - labkit.close_all
from labkit.runtime.local.source import LocalRanks
from labkit.runtime.options import Count, check_cluster, check_remote, seconds
from labkit.runtime.output import Outputs
from labkit.i18n import N_, tr

class Cluster:
    """A pool of `world_size` ranks. See the module docstring; docs/architecture.md has how a run flows."""
    # checked when set, in the constructor and later (``cluster.output_lines = 100``)
    output_lines = Count(minimum=0, none_ok=True, what=N_("a whole number of lines"))
    output_bytes = Count(minimum=0, none_ok=True, what=N_("a whole number of bytes"))
    max_events = Count(minimum=0, what=N_("a whole number of events"))
    max_event_bytes = Count(minimum=0, what=N_("a whole number of bytes"))

    def __init__(self, world_size: int = 4, backend: str = "auto", *, timeout: float = 120.0,
                 spares: int = None, start_timeout: float = 120.0, env: dict = None,
                 pg_timeout: float = None, output_lines: int = 10_000,
                 output_bytes: int = 1_000_000, max_events: int = EVENT_LIMITS[0],
                 max_event_bytes: int = EVENT_LIMITS[1], source=None):
        """timeout: default seconds a run may take before RankTimeout.
        spares: standby workers kept ready for recovery (default: world_size; LABKIT_ZYGOTE=0).
        env: extra environment variables for every rank, set when its process starts, so before
            torch and the process group read them: ``env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}``.
        pg_timeout: seconds a collective may wait inside gloo/NCCL before it fails (the
            ``timeout=`` of ``init_process_group``). Default max(600 s, 2 x timeout), so that
            labkit, not gloo/NCCL, reports a hang first; set it shorter to see the process
            group's own timeout error (it comes back as a RankError naming the rank).
        output_lines, output_bytes: at most this much output per rank per run reaches the cell
            (None: no limit); the rest is read and counted ("... N lines not shown"). Change
            them later as ``cluster.output_lines = ...``.
        max_events, max_event_bytes: at most this many `labkit.emit` events (and pickled bytes
            of them) per rank per run reach `cluster.events`; the rest are dropped on the rank
            and counted ("rank 1: 52,000 events dropped").
        source: where the ranks come from (source.py); default this machine, with `spares`
            standby workers. `Cluster.remote(...)` passes ranks that torchrun starts elsewhere."""
        self.world_size, self.timeout, start_timeout, self.pg_timeout, self.env = check_cluster(
            world_size, backend, timeout, spares, start_timeout, env, pg_timeout)
        self.output_lines, self.output_bytes = output_lines, output_bytes
        self.max_events, self.max_event_bytes = max_events, max_event_bytes
        self._events = Events()                   # what the ranks emit: cluster.events, on_event
        self._outputs = Outputs()                 # what each rank printed, on its way to the cell
        self._group = None                        # group.RankGroup: the ranks now, once taken
        self._closed, self._gen, self._task_ids = False, 0, itertools.count(1)   # gen: process groups
        self._run_lock = threading.Lock()
        self.start_timeout, self.restart_timeout = start_timeout, 120.0   # to take and join ranks
        self.source = source if source is not None else LocalRanks(spares)
        self._finalizer = weakref.finalize(self, self.source.close)
        self.backend, self.device_type, self.threads_per_rank = "?", "?", None
        t0 = time.perf_counter()
        try:
            self.source.start(self.world_size, backend, self.env, start_timeout)
            self._set_backend(self.source.backend)
            if source is None:                    # ranks of this machine: joined before we return
                self._promote()                   # (a source from outside, torchrun's: the first run)
        except BaseException as exc:              # leave nothing behind: processes, threads, folders
            self.close()
            if isinstance(exc, (errors.StartError, KeyboardInterrupt, ValueError, TypeError)):
                raise
            raise errors.StartError(f"the cluster could not start: {type(exc).__name__}: {exc}") from exc
        self.startup_seconds = time.perf_counter() - t0
        opened(self)                              # the newest of this kernel (kernel.py)
        from labkit.versions import notice_once
        notice_once()                             # one line if this torch is not the tested one
        errors.install_traceback_filter()
        self.source.top_up()

    @classmethod
    def remote(cls, listen: str, nnodes: int, nproc_per_node: int, *, advertise: str = None,
               rdzv_endpoint: str = None, join_file: str = None, tls: bool = True,
               max_restarts: int = 100, heartbeat_timeout: float = 5.0,
               start_timeout: float = 600.0, restart_timeout: float = 120.0, **kwargs):
        """Ranks that torchrun (or srun) starts on other machines; prints the command to run
        on each node. The arguments: remote/source.RemoteRanks; the rest as `Cluster`
        (`env` goes on the command line). docs/remote.md has the commands and the security model."""
        from labkit.runtime.remote.source import RemoteRanks
        check_remote(listen=listen, nnodes=nnodes, nproc_per_node=nproc_per_node,
                     advertise=advertise, rdzv_endpoint=rdzv_endpoint, join_file=join_file,
                     tls=tls, max_restarts=max_restarts, heartbeat_timeout=heartbeat_timeout,
                     start_timeout=start_timeout, restart_timeout=restart_timeout, rest=kwargs)
        source = RemoteRanks(listen, nnodes, nproc_per_node, advertise=advertise,
                             rdzv_endpoint=rdzv_endpoint, join_file=join_file, tls=tls,
                             max_restarts=max_restarts, heartbeat_timeout=heartbeat_timeout)
        cluster = cls(source.world_size, start_timeout=start_timeout, source=source, **kwargs)
        cluster.restart_timeout = restart_timeout   # how long a run waits for torchrun's restarts
        return cluster

    def _set_backend(self, backend: str) -> None:
        self.backend = backend
        self.device_type = "?" if backend == "?" else "cuda" if backend == "nccl" else "cpu"
        self.threads_per_rank = self.source.threads_per_rank

    @property
    def events(self) -> list:
        """Event(rank, time, data) of every `labkit.emit` of the last run."""
        return self._events.last

    @property
    def ranks(self) -> list:
        """The ranks' handles by rank (handle.RankHandle); empty until ranks were taken."""
        return list(self._group.ranks) if self._group is not None and self._group.alive else []

    @property
    def _needs_restart(self) -> bool:
        return self._group is None or not self._group.joined

    def _promote(self) -> None:
        """Take `world_size` ranks from the source (spares here, torchrun's ranks elsewhere; it
        may wait for them) and have them join a fresh process group as ranks 0..n-1. Taking
        and joining each get the timeout: start_timeout the first time, restart_timeout after."""
        self._kill_ranks()                        # what is left of a group that failed to join
        wait = self.start_timeout if self._gen == 0 else self.restart_timeout
        ranks = self.source.take(self.world_size, time.monotonic() + wait)
        self._group = RankGroup(ranks, self.source, self._outputs)   # ours: an interrupt kills them
        self._set_backend(self.source.backend)
        self._gen += 1
        self._group.join(self.pg_timeout, self._gen, time.monotonic() + wait)

    def wait_for_ranks(self, timeout: float = None) -> None:
        """Block until every rank has joined (the first run does this anyway; ranks on this
        machine have joined when the constructor returns)."""
        if timeout is not None:
            timeout = seconds(timeout, "timeout")
        with self._run_lock, interrupts.Guard() as guard:
            try:
                if self._needs_restart:
                    if timeout:
                        self.start_timeout = timeout
                    self._promote()
            except KeyboardInterrupt:
                raise self._interrupted(guard, "wait_for_ranks()") from None

    def _rejoin(self, timeout: float = 60.0) -> None:
        """All ranks join a new process group, namespaces kept (after destroy_process_group()
        in a rank, or a collective that failed half-way)."""
        self._gen += 1
        self._group.rejoin(self._gen, time.monotonic() + timeout)

    def _kill_ranks(self, why: str = None) -> None:
        if self._group is not None:
            self._group.kill(why)
        self._group = None

    # -- running work ---------------------------------------------------------------------
    def run(self, fn, *args, timeout: float = None, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results, index = rank."""
        __tracebackhide__ = True
        self._check_open()
        with shm.outbox(self.source.local) as keep:   # tensors go through shared memory (shm.py)
            payload = wire.dumps_call(fn, args, kwargs, keep=keep)
            return self._execute("call", payload, timeout, f"{getattr(fn, '__name__', 'fn')}()")

    def push(self, **values) -> None:
        """Set variables in every rank's %%ranks namespace: ``cluster.push(lr=0.1)``."""
        __tracebackhide__ = True
        self._check_open()
        with shm.outbox(self.source.local) as keep:
            self._execute("push", wire.dumps_values(values, keep=keep), None, "push")

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

    def native_log(self, rank: int) -> list:
        """The lines torch's C++ code logged on `rank` in its last run that logged any (the
        cell shows them folded into one line)."""
        return list(self._outputs.native.get(rank, []))

    def on_event(self, callback):
        """Call ``callback(Event(rank, time, data))`` for each `labkit.emit` during runs.
        Returns a function that unsubscribes."""
        callbacks = self._events.callbacks
        callbacks.append(callback)
        return lambda: callbacks.remove(callback) if callback in callbacks else None

    def _execute(self, kind: str, payload, timeout, label: str) -> list:
        __tracebackhide__ = True
        timeout = self.timeout if timeout is None else seconds(timeout, "timeout")
        with self._run_lock, interrupts.Guard() as guard:
            try:
                if self._group is not None and self._group.in_flight:   # the last run was cut short
                    self._kill_ranks("the run before was interrupted")
                if self._needs_restart:
                    self._promote()
                    self.source.top_up()
                self._events.last = []
                outcome = self._group.run(next(self._task_ids), kind, payload, timeout,
                                          (self.max_events, self.max_event_bytes),
                                          (self.output_lines, self.output_bytes), self._events)
                if self._closed:
                    raise RuntimeError(f"the cluster was closed (close() was called) while {label} "
                                       "was running; start a new one with labkit.Cluster(...)")
                self._gen += bool(outcome.pg_lost)   # they join a new process group: its prefix
                if not self._group.recover(outcome, self._gen):
                    self._group = None            # killed: dead, stuck, or could not join again
                    self.source.top_up()
            except KeyboardInterrupt:
                raise self._interrupted(guard) from None
        return outcome.result(self.world_size, label, timeout)

    def _interrupted(self, guard, what: str = None) -> KeyboardInterrupt:
        """Ctrl-C during a run, a restart or a wait for the ranks: stop the ranks (new ones
        too, whatever they were doing), start spares, and say so."""
        guard.shield()                            # a second Ctrl-C waits for the clean-up
        self._kill_ranks("stopped after an interrupt (Ctrl-C)")
        self.source.top_up()
        return interrupts.stopped(self.world_size, what)

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
        with self._run_lock, interrupts.Guard() as guard:
            try:
                self._kill_ranks("restart() was called")
                self._promote()
            except KeyboardInterrupt:
                raise self._interrupted(guard, "restart()") from None
        self.source.top_up()

    def wait_for_spares(self, timeout: float = 60.0) -> bool:
        return self.source.wait_for_spares(timeout)   # every spare started: recovery is fast

    def close(self) -> None:
        """Stop every rank and spare. Safe to call twice."""
        self._closed = True
        if self._group is not None:
            self._group.let_go()
        self._group = None
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        where = self.source.describe()            # "2 spares", "2 node(s) x 4 at host:port", ...
        state = (tr("closed") if self._closed else tr("{ranks} ranks ready, {where}", ranks=len(self.ranks), where=where)
                 if where else tr("{ranks} ranks ready", ranks=len(self.ranks)))
        return (f"Cluster(world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device_type!r}, threads_per_rank={self.threads_per_rank}; {state})")
