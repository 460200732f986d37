"""The ranks of one generation, owned as one: what the Cluster does to all its ranks at once.

    group = RankGroup(source.take(n, deadline), source, outputs)   # cluster.py's _promote
    group.join(pg_timeout, gen, deadline)  # Init to each, wait for every Ready
    outcome = group.run(task_id, "call", payload, timeout, ...)   # send, collect, release
    group.recover(outcome, gen)            # after a failure: join again, or kill (False)
    group.kill("why")                      # every process ended and reaped, given back

The group sends the task to every rank (protocol.Task, with the notebook's folder and edited
modules: learner.py) and has `collect` wait for it; collect reads the results and tells the
ranks that may free their shared memory (Release). After the run `recover` keeps the group,
has it join a new process group (its own was lost), or kills it (a rank is dead, stuck or
unreadable); the Cluster then takes a new one. A killed group is done: its ranks are handed
back to the source (`forget`), and killing it again does nothing.
"""
import os
import select
import selectors
import sys
import threading
import time

from labkit.i18n.lang import lang as i18n_lang
from labkit.runtime import errors, learner, protocol
from labkit.runtime.collect import collect
from labkit.runtime.handle import pickled


class RankGroup:
    def __init__(self, ranks: list, source, outputs):
        self.ranks = ranks            # handle.RankHandle by rank
        self.source = source          # where they came from (source.RankSource): stacks, forget
        self.outputs = outputs        # output.Outputs: what each rank printed, on its way to the cell
        self.joined = False           # every rank is in the process group
        self.in_flight = False        # a task was sent and not collected (a run cut short)
        self.alive = True             # not killed yet
        self._sel = None              # what collect waits on, kept from run to run (_waits)
        self._waits_lock = threading.Lock()   # close() may come from another thread (let_go)
        self._waiting = False         # a collect is using the selector now
        self._let_go = False          # the Cluster closed: the selector goes after the last wait
        self._out_poll = None         # which output pipes hold bytes (_outputs_poll)

    # -- the process group --------------------------------------------------------------------
    def join(self, pg_timeout: float, gen: int, deadline: float) -> None:
        """Send each rank its Init (its rank, the backend, the notebook's sys.path and language,
        and how it meets the others for the `gen`-th process group: the source's
        `init_options`) and wait for every Ready."""
        opts = {"world_size": len(self.ranks), "backend": self.source.backend,
                "pg_timeout": pg_timeout, "sys_path": [p or os.getcwd() for p in sys.path],
                "lang": i18n_lang()}              # what labkit prints on the rank: the notebook's
        for r, w in enumerate(self.ranks):
            w.rank = r
            w.send(protocol.Init({"rank": r, **opts, **self.source.init_options(w, r, gen)}))
        self._wait_joined(deadline)

    def rejoin(self, gen: int, deadline: float) -> None:
        """The same ranks join the `gen`-th process group, under a new store prefix (and, on
        this machine, a new rendezvous file: source.rejoin_options), namespaces kept (after
        destroy_process_group() in a rank, or a collective that failed half-way)."""
        self.joined = False
        store = self.source.rejoin_options(gen)
        for w in self.ranks:
            w.send(protocol.Rejoin(f"labkit/{gen}/", store))
        self._wait_joined(deadline)

    def _wait_joined(self, deadline: float) -> None:
        """Every rank's reply to Init/Rejoin; on a failure kill them all and say why."""
        waiting = set(range(len(self.ranks)))
        while waiting:
            for r in list(waiting):
                w = self.ranks[r]
                self.outputs.show(w)
                msgs = w.read_messages()
                if w.eof or w.garbled:
                    how = w.how_it_died() if w.eof else f"sent garbage ({w.garbled})"
                    self.kill()
                    raise errors.StartError(f"rank {r} {how} while joining the process group")
                for msg in msgs:
                    if isinstance(msg, protocol.InitFailed):
                        self.kill()
                        f = errors.failure_from_report(r, msg.report)
                        raise errors.StartError(f"rank {r} could not join the process group: "
                                                f"{f.type}: {f.message}\n{f.traceback}")
                    if isinstance(msg, protocol.Ready):
                        waiting.discard(r)
            if waiting and time.monotonic() > deadline:
                self.kill()
                raise errors.StartTimeout(f"ranks {sorted(waiting)} did not join the process group in time")
            if waiting:
                time.sleep(0.005)
        self.joined = True

    # -- what a run waits on, kept from run to run ------------------------------------------------
    def _waits(self) -> selectors.BaseSelector:
        """One selector over every rank's control connection and output pipe (data: ("conn", r)
        or ("out", r)) for `collect`, kept from run to run: made and closed for each run it
        cost a trivial run ten system calls. Dropped when a run's wait was cut short or a
        rank's connection closed (the Outcome says: `waits_kept`), and when the group is killed."""
        if self._sel is None:
            sel = selectors.DefaultSelector()
            try:
                for r, w in enumerate(self.ranks):
                    sel.register(w.conn.fileno(), selectors.EVENT_READ, ("conn", r))
                    sel.register(w.out_fd, selectors.EVENT_READ, ("out", r))
            except BaseException:
                sel.close()
                raise
            self._sel = sel
        return self._sel

    def _drop_waits(self) -> None:
        if self._sel is not None:
            self._sel.close()
            self._sel = None

    def let_go(self) -> None:
        """The Cluster closes (its source ends the processes): the group closes its selector now
        rather than whenever the garbage collector gets to it (a descriptor per closed cluster);
        if another thread is waiting on it in a run, that run closes it when its wait ends."""
        with self._waits_lock:
            self._let_go = True
            if not self._waiting:
                self._drop_waits()

    def _outputs_poll(self) -> select.poll:
        """One poll of every rank's output pipe: which hold bytes, so that only those are read
        (the four empty pipes of a run that printed nothing, read before and after it, were
        eight system calls). The pipes stay open until kill() reaps the ranks."""
        if self._out_poll is None:
            self._out_poll = select.poll()
            for w in self.ranks:
                self._out_poll.register(w.out_fd, select.POLLIN)
        return self._out_poll

    # -- one task ---------------------------------------------------------------------------------
    def run(self, task_id: int, kind: str, payload, timeout: float, limits: tuple,
            output_limits: tuple, events):
        """Send one task to every rank and wait for it (collect.py): the `collect.Outcome`.
        limits: (events, bytes of them) per rank; output_limits: (lines, bytes) per rank;
        events: the collect.Events that receive what the ranks emit."""
        out_poll = self._outputs_poll()
        self.outputs.show_all(self.ranks, out_poll)   # what a rank printed between runs
        for w in self.ranks:
            self.outputs.new_run(w, *output_limits)
        data = pickled(protocol.Task(task_id, kind, payload, learner.snapshot(), limits))
        self.in_flight = True
        for w in self.ranks:                      # pickled once for all of them
            w.send_pickled(data)                  # a rank that is gone: its EOF, in collect
        with self._waits_lock:
            sel, self._waiting = self._waits(), True
        outcome = None
        try:
            outcome = collect(self, task_id, timeout, limits, events, sel, out_poll)
        finally:
            with self._waits_lock:
                self._waiting = False
                if outcome is None or not outcome.waits_kept or self._let_go:
                    self._drop_waits()        # an interrupt, a closed connection, or close()
        self.in_flight = False
        return outcome

    def recover(self, outcome, gen: int, timeout: float = 60.0) -> bool:
        """After a run (its collect.Outcome): True if these ranks serve the next one, after
        joining the `gen`-th process group if theirs was lost; False if they were killed
        (a rank dead, stuck or unreadable, or they could not join again)."""
        if outcome.needs_new_ranks:
            self.kill()
            return False
        if outcome.pg_lost:
            try:
                self.rejoin(gen, time.monotonic() + timeout)
            except (RuntimeError, TimeoutError) as exc:
                print(f"labkit: the ranks could not join a new process group ({exc}); "
                      "starting fresh ranks", file=sys.stderr)
                return False
        return True

    # -- the end ------------------------------------------------------------------------------------
    def kill(self, why: str = None) -> None:
        """End every rank (with every process it started), show what each printed last, and
        hand them back to the source. Safe to call twice."""
        if not self.alive:
            return
        self.alive = self.joined = False
        self._drop_waits()
        self._out_poll = None
        for w in self.ranks:
            w.kill(why)
        for w in self.ranks:
            w.reap(1.0)
            self.outputs.show(w, final=True)
            self.outputs.forget(w)
            self.source.forget(w)
