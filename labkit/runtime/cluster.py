"""`labkit.Cluster`: a persistent pool of real torch.distributed ranks driven from a notebook.

    cluster = labkit.Cluster(world_size=4)          # gloo on CPU, or NCCL with a GPU per rank
    cluster.run(fn, *args, timeout=None, **kwargs)  # -> [result of rank 0, rank 1, ...]

The ranks start once and wait for work; `run` sends `fn` by value to every rank, streams each
rank's prints into the cell as ``[rank N] ...`` and returns the results by rank. Failures come
back as `RankError` (a traceback per rank) and hangs as `RankTimeout` (where each rank was
stuck). After a hang, a crash or an interrupt the ranks are replaced by spares (forked from a
zygote in ~0.1 s, zygote.py), so the next `run` works within a second, failure after failure.

Where ranks come from is the Cluster's *source* (source.py): this machine by default
(local/source.py), or torchrun on other machines with `Cluster.remote(...)` (remote/source.py).
Everything else (the run loop, recovery, output, errors) is the same for both.
"""
import itertools
import os
import sys
import threading
import time
import weakref

from labkit.i18n.lang import lang as i18n_lang
from labkit.runtime import errors, interrupts, protocol, shm, wire
from labkit.runtime.gpus import check_backend
from labkit.runtime.collect import Event, collect, wait_joined
from labkit.runtime.context import EVENT_LIMITS
from labkit.runtime.local.source import LocalRanks
from labkit.i18n.messages import tr
from labkit.runtime.options import Count, check_env, check_remote, check_world_size, count, seconds
from labkit.runtime.output import Outputs
from labkit.i18n import N_

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
        self.world_size = check_world_size(world_size)
        self.timeout = seconds(timeout, "timeout", none_ok=False)
        start_timeout = seconds(start_timeout, "start_timeout", none_ok=False)
        pg_timeout = seconds(pg_timeout, "pg_timeout")
        self.pg_timeout = pg_timeout if pg_timeout else max(600.0, 2 * self.timeout)
        self.env = check_env(env)
        count(spares, "spares", none_ok=True, what=N_("a whole number of standby workers"),
              none_means=N_("as many as world_size"))
        check_backend(backend)
        self.output_lines, self.output_bytes = output_lines, output_bytes
        self.max_events, self.max_event_bytes = max_events, max_event_bytes
        self.events = []                          # Event(rank, time, data) of the last run
        self._callbacks = []
        self._outputs = Outputs()                 # what each rank printed, on its way to the cell
        self._ranks = []                          # Worker by rank
        self._needs_restart = self._in_flight = self._closed = False   # _in_flight: a run not yet collected
        self._gen = 0
        self._task_ids = itertools.count(1)
        self._run_lock = threading.Lock()
        self._source = source if source is not None else LocalRanks(spares)
        self._finalizer = weakref.finalize(self, self._source.close)
        self.backend, self.device_type, self.threads_per_rank = "?", "?", None
        t0 = time.perf_counter()
        try:
            self._source.start(self.world_size, backend, self.env, start_timeout)
            self._set_backend(self._source.backend)
            if self._source.join_at_start:
                self._promote()
            else:
                self._needs_restart = True        # the first run waits for the ranks
        except BaseException as exc:              # leave nothing behind: processes, threads, folders
            self.close()
            if isinstance(exc, (errors.StartError, KeyboardInterrupt, ValueError, TypeError)):
                raise
            raise errors.StartError(f"the cluster could not start: {type(exc).__name__}: {exc}") from exc
        self.startup_seconds = time.perf_counter() - t0
        global _current
        _current = weakref.ref(self)
        others = [c for c in _open if not c.closed]
        if others:
            procs_held = sum(c._source.process_count() for c in others)
            print(tr("labkit: {n} other cluster(s) still open in this kernel, holding {procs} processes; "
                     "close them with .close() or labkit.close_all() if you no longer need them.",
                     n=len(others), procs=procs_held), file=sys.stderr)
        _open.add(self)
        from labkit.versions import notice_once
        notice_once()                             # one line if this torch is not the tested one
        errors.install_traceback_filter()
        self._source.top_up()

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
                     start_timeout=start_timeout, restart_timeout=restart_timeout)
        if "source" in kwargs or "world_size" in kwargs:
            raise TypeError(tr("Cluster.remote takes its world size from nnodes x nproc_per_node "
                               "and its ranks from torchrun: no world_size= or source="))
        source = RemoteRanks(listen, nnodes, nproc_per_node, advertise=advertise,
                             rdzv_endpoint=rdzv_endpoint, join_file=join_file, tls=tls,
                             max_restarts=max_restarts, heartbeat_timeout=heartbeat_timeout,
                             restart_timeout=restart_timeout)
        return cls(source.world_size, start_timeout=start_timeout, source=source, **kwargs)

    def __getattr__(self, name):
        """The source's own public names (`cluster.commands`, `cluster.nodes` of a remote
        cluster) read as the cluster's."""
        source = self.__dict__.get("_source")
        if source is not None and name in source.public:
            return getattr(source, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _set_backend(self, backend: str) -> None:
        self.backend = backend
        self.device_type = "?" if backend == "?" else "cuda" if backend == "nccl" else "cpu"
        self.threads_per_rank = self._source.threads_per_rank

    def _promote(self) -> None:
        """Take `world_size` ranks from the source (spares here, torchrun's ranks elsewhere) and
        have them join a fresh process group as ranks 0..n-1."""
        first = self._gen == 0
        deadline = time.monotonic() + (self._source.start_timeout if first else self._source.restart_timeout)
        ranks = self._source.take(self.world_size, deadline)
        self._ranks = ranks                       # ours now: an interrupt from here kills them
        self._needs_restart = True                # until they have joined
        self._set_backend(self._source.backend_for(ranks))
        self._gen += 1
        sys_path = [p or os.getcwd() for p in sys.path]
        for r, w in enumerate(ranks):
            w.rank = r
            w.conn.send(protocol.Init({
                "rank": r, "world_size": self.world_size, "backend": self.backend,
                "pg_timeout": self.pg_timeout, "sys_path": sys_path,
                "lang": i18n_lang(),          # what labkit prints on the rank: the notebook's language
                **self._source.init_options(w, r, self._gen)}))
        self._ranks = ranks
        wait_joined(self, deadline + self._source.join_grace, self._kill_ranks)
        self._needs_restart = False

    def wait_for_ranks(self, timeout: float = None) -> None:
        """Block until every rank has joined (the first run does this anyway; ranks on this
        machine have joined when the constructor returns)."""
        if timeout is not None:
            timeout = seconds(timeout, "timeout")
        with self._run_lock, interrupts.Guard() as guard:
            try:
                if self._needs_restart:
                    if timeout:
                        self._source.start_timeout = timeout
                    self._promote()
            except KeyboardInterrupt:
                raise self._interrupted(guard, "wait_for_ranks()") from None

    def _rejoin(self, timeout: float = 60.0) -> None:
        """All ranks join a new process group, namespaces kept (after destroy_process_group()
        in a rank, or a collective that failed half-way)."""
        self._gen += 1
        for w in self._ranks:
            w.conn.send(protocol.Rejoin(f"labkit/{self._gen}/"))
        wait_joined(self, time.monotonic() + timeout, self._kill_ranks)

    def _kill_ranks(self, why: str = None) -> None:
        for w in self._ranks:
            w.kill(why)
        for w in self._ranks:
            w.reap(1.0)
            self.show_output(w, final=True)
            self._outputs.forget(w)
            self._source.forget(w)
        self._ranks = []
        self._needs_restart = True

    # -- running work ---------------------------------------------------------------------
    def run(self, fn, *args, timeout: float = None, **kwargs) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results, index = rank."""
        __tracebackhide__ = True
        self._check_open()
        with shm.outbox(self._source.local) as keep:   # tensors go through shared memory (shm.py)
            payload = wire.dumps_call(fn, args, kwargs, keep=keep)
            return self._execute("call", payload, timeout, f"{getattr(fn, '__name__', 'fn')}()")

    def push(self, **values) -> None:
        """Set variables in every rank's %%ranks namespace: ``cluster.push(lr=0.1)``."""
        __tracebackhide__ = True
        self._check_open()
        with shm.outbox(self._source.local) as keep:
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
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    def _execute(self, kind: str, payload, timeout, label: str) -> list:
        __tracebackhide__ = True
        timeout = self.timeout if timeout is None else seconds(timeout, "timeout")
        with self._run_lock, interrupts.Guard() as guard:
            try:
                if self._in_flight:               # the last run was cut short mid-way
                    self._kill_ranks("the run before was interrupted")
                if self._needs_restart:
                    self._promote()
                    self._source.top_up()
                for w in self._ranks:
                    self.show_output(w)
                    self._outputs.new_run(w, self.output_lines, self.output_bytes)
                task_id = next(self._task_ids)
                self.events = []
                self._in_flight = True
                limits = (self.max_events, self.max_event_bytes)
                wire.send_task(self._ranks, task_id, kind, payload, limits)   # a dead rank: EOF below
                outcome = collect(self, task_id, timeout, limits)
                wire.release(self._ranks, task_id)  # results loaded: ranks free their copies
                if self._closed:
                    raise RuntimeError(f"the cluster was closed (close() was called) while {label} "
                                       "was running; start a new one with labkit.Cluster(...)")
                if outcome.needs_new_ranks:
                    self._kill_ranks()
                    self._source.top_up()
                elif outcome.pg_lost:
                    try:
                        self._rejoin()
                    except (RuntimeError, TimeoutError) as exc:
                        print(f"labkit: the ranks could not join a new process group ({exc}); "
                              "starting fresh ranks", file=sys.stderr)
                        self._source.top_up()
                self._in_flight = False
            except KeyboardInterrupt:
                raise self._interrupted(guard) from None
        return outcome.result(self.world_size, label, timeout)

    def _interrupted(self, guard, what: str = None) -> KeyboardInterrupt:
        """Ctrl-C during a run, a restart or a wait for the ranks: stop the ranks (new ones
        too, whatever they were doing), start spares, and say so."""
        guard.shield()                            # a second Ctrl-C waits for the clean-up
        self._kill_ranks("stopped after an interrupt (Ctrl-C)")
        self._in_flight = False
        self._source.top_up()
        if what is None:                          # a run
            return KeyboardInterrupt(tr("interrupted: the {n} ranks were stopped; the next run "
                                        "starts fresh ones", n=self.world_size))
        return KeyboardInterrupt(tr("interrupted: {what} was stopped and the {n} ranks with it; "
                                    "the next run starts fresh ones", what=what, n=self.world_size))

    # -- what collect() uses of the cluster (collect.Host) ---------------------------------
    @property
    def ranks(self) -> list:
        """The ranks' handles by rank (handle.RankHandle), for the run loop."""
        return list(self._ranks)

    def show_output(self, w, final: bool = False) -> None:
        """Move what rank `w` printed into the cell (all of it, its last partial line too, if
        final); within the output budget of the run."""
        self._outputs.show(w, final)

    def deliver_event(self, event: Event) -> None:
        """Add one labkit.emit(...) event to `events` and call every `on_event` callback."""
        self.events.append(event)
        for cb in list(self._callbacks):
            try:
                cb(event)
            except BaseException as exc:          # noqa: B902 - a broken plot, or sys.exit() in it
                if interrupts.is_real(exc):       # Ctrl-C pressed while it ran: the run stops
                    raise
                print(tr("labkit: event callback {cb} failed: {error}; removed (the run goes on)",
                         cb=repr(cb), error=repr(exc)), file=sys.stderr)
                if cb in self._callbacks:
                    self._callbacks.remove(cb)

    def dump_stacks(self, ranks: list, which: list) -> dict:
        """Where each of these ranks is now (collect asks, for hangs and stuck peers)."""
        return self._source.dump_stacks(ranks, which)

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
        self._source.top_up()

    def wait_for_spares(self, timeout: float = 60.0) -> bool:
        return self._source.wait_for_spares(timeout)   # every spare started: recovery is fast

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
        state = tr("closed") if self._closed else tr("{ranks} ranks ready, {spares} spares", ranks=len(self._ranks),
                                                    spares=self._source.spare_count())
        where = self._source.describe()
        return (f"Cluster(world_size={self.world_size}, backend={self.backend!r}, "
                f"device={self.device_type!r}, threads_per_rank={self.threads_per_rank}"
                f"{'; ' + where if where else ''}; {state})")
