"""Waiting for one task on every rank: results, output, events, failures, deaths and hangs.

One loop on the notebook's main thread selects over every rank's control connection and
output pipe, so prints reach the cell as they happen and in order per rank. A rank's output
is flushed into its pipe before its result is sent, so after the last result one more drain
shows everything the task printed. The loop never blocks past the run's deadline: messages
are read only as far as their bytes have arrived (`Worker.read_messages`).

`collect` only watches (and, once every result is loaded, tells the ranks whose result came
through shared memory that they may free it: Release); what to do afterwards (replace ranks,
join a new process group) is the Cluster's decision, read from the `Outcome`. It uses of the
group (group.RankGroup) its ranks, its outputs and its source's `dump_stacks`, and of each rank
only what `handle.RankHandle` offers, so local and remote ranks are waited on alike; what the
ranks emit goes to an `Events` (the Cluster's `events` and `on_event` callbacks).
"""
import sys
import time
from collections import namedtuple

from labkit.i18n.messages import tr
from labkit.runtime import errors, interrupts, protocol, stacks, wire

Event = namedtuple("Event", "rank time data")   # one labkit.emit(...) from a rank
GRACE_S = 0.5      # after a rank dies, how long the others get to finish before they are stopped
PROBE_S = 0.5      # after a rank raises, how often the unfinished ranks' stacks are checked


class Events:
    """What the ranks emit during runs: the last run's events (`cluster.events`) and the
    callbacks that see each one as it arrives (`cluster.on_event`)."""

    def __init__(self):
        self.last = []                # Event(rank, time, data) of the last run
        self.callbacks = []

    def deliver(self, event: Event) -> None:
        self.last.append(event)
        for cb in list(self.callbacks):
            try:
                cb(event)
            except BaseException as exc:          # noqa: B902 - a broken plot, or sys.exit() in it
                if interrupts.is_real(exc):       # Ctrl-C pressed while it ran: the run stops
                    raise
                print(tr("labkit: event callback {cb} failed: {error}; removed (the run goes on)",
                         cb=repr(cb), error=repr(exc)), file=sys.stderr)
                if cb in self.callbacks:
                    self.callbacks.remove(cb)


class Outcome:
    def __init__(self, n: int):
        self.results = [None] * n
        self.failures = {}          # rank -> errors.Failure
        self.dead = {}              # rank -> how it died
        self.broken = set()         # ranks whose control connection can no longer be read
        self.pending = set(range(n))
        self.timed_out = False
        self.stuck = {}             # rank -> where it was
        self.pg_lost = set()        # ranks whose process group is gone or out of step
        self.waits_kept = False     # the selector's registrations all stand: it serves the next run
        self.nodes = None           # rank -> its node, for ranks on other machines
        self.events = {}            # rank -> events delivered this run
        self.dropped = {}           # rank -> events dropped (over the cap per rank per run)

    @property
    def needs_new_ranks(self) -> bool:
        """Some rank is dead, stuck or unreadable: the cluster must replace its ranks."""
        return bool(self.dead or self.pending or self.broken)

    def result(self, world_size: int, label: str, timeout: float) -> list:
        __tracebackhide__ = True
        if not (self.failures or self.dead or self.pending):
            return self.results
        restarted = self.needs_new_ranks
        if self.timed_out and not self.failures and not self.dead:
            done = [r for r in range(len(self.results)) if r not in self.pending]
            raise errors.RankTimeout(errors.timeout_message(label, timeout, self.stuck, done, restarted,
                                                            self.nodes),
                                     {}, self.stuck, restarted)
        failures = dict(self.failures)
        for r, how in self.dead.items():
            failures[r] = errors.Failure(r, "RankDied", how, "")
        msg = errors.failure_message(label, world_size, failures, self.stuck, restarted, self.nodes)
        raise errors.RankError(msg, failures, self.stuck, restarted)


def describe(found: dict) -> dict:
    return {r: s if isinstance(s, str) else stacks.describe_stack(s) for r, s in found.items()}


def _unreadable(r: int, exc: BaseException) -> errors.Failure:
    return errors.Failure(r, "ResultError",
                          f"rank {r} finished, but the notebook cannot read its result "
                          f"({type(exc).__name__}: {exc}). Return plain numbers, lists, dicts or "
                          "tensors, or objects of classes the notebook can import.", "")


def _event_fields(r: int, data: dict):
    """An event's fields, each unpickled on its own; None (the event dropped, said) when one
    cannot be read here: the connection and every rank's state are fine (issue 39)."""
    import pickle
    fields = {}
    for k, v in data.items():
        try:
            fields[k] = pickle.loads(v)
        except BaseException as exc:              # noqa: B902 - as a result's (see collect)
            if interrupts.is_real(exc):
                raise
            print(tr("labkit: rank {rank}: an event was dropped: the notebook cannot read its "
                     "field {field!r} ({error}). Emit plain numbers, strings, lists or dicts, "
                     "or objects of classes the notebook can import.", rank=r, field=k,
                     error=f"{type(exc).__name__}: {errors.safe_str(exc)}"), file=sys.stderr)
            return None
    return fields


def _say_dropped(out: Outcome, limits) -> None:
    if out.dropped:
        each = ", ".join(f"rank {r}: {n:,}" for r, n in sorted(out.dropped.items()))
        print(f"labkit: events dropped ({each}): at most {limits[0]:,} labkit.emit events "
              f"({limits[1]:,} bytes) per rank per run reach cluster.events; emit less often, "
              "or raise cluster.max_events / cluster.max_event_bytes", file=sys.stderr)


def collect(group, task_id: int, timeout: float, limits, events: Events, sel, out_poll) -> Outcome:
    """Wait for task `task_id` on every rank of `group` (group.RankGroup), at most `timeout`
    seconds; at most `limits` (events, bytes) per rank reach `events`. sel: the group's
    selector over every rank's connection and output pipe (data ("conn", r) or ("out", r)),
    kept from run to run unless a connection closes here (`Outcome.waits_kept`); out_poll: a
    poll of the output pipes alone, for the last look after every result."""
    ranks, outputs = list(group.ranks), group.outputs
    out = Outcome(len(ranks))
    out.nodes = {r: w.where for r, w in enumerate(ranks) if w.where} or None
    mapped = {}                                        # rank -> its result maps its shared memory
    deadline = time.monotonic() + timeout
    died_at = probe_at = None
    gone = set()                                       # ranks whose connection is closed

    def fail(r, failure=None, how=None):
        nonlocal died_at, probe_at
        out.pending.discard(r)
        if failure is not None:
            out.failures[r] = failure
            probe_at = probe_at or time.monotonic() + PROBE_S
        else:
            out.dead[r] = how
            died_at = died_at or time.monotonic()

    while out.pending:
        now = time.monotonic()
        if died_at is not None and now - died_at >= GRACE_S:
            break                                  # a rank is gone: all will be replaced
        if now >= deadline:
            out.timed_out = True
            break
        if probe_at is not None and now >= probe_at and died_at is None:
            # A rank raised. The others may be computing on their own (let them finish:
            # their state is kept) or waiting in a collective for the failed rank (they
            # never will: stop them). Their stacks tell which.
            found = group.source.dump_stacks(ranks, sorted(out.pending))
            if any(not isinstance(s, str) and stacks.in_collective(s) for s in found.values()):
                out.stuck = describe(found)
                break
            probe_at = time.monotonic() + PROBE_S
        wake = min(deadline, died_at + GRACE_S if died_at else deadline, probe_at or deadline)
        for key, _ in sel.select(max(0.0, min(wake - now, 0.1))):
            what, r = key.data
            w = ranks[r]
            if what == "out":
                outputs.show(w)
                continue
            if r in gone:
                continue
            for msg in w.read_messages():
                if getattr(msg, "task_id", None) != task_id:
                    continue                      # left over from an earlier task
                if isinstance(msg, protocol.Event):   # capped on the rank; here too, for safety
                    if out.events.get(r, 0) < limits[0]:
                        data = _event_fields(r, msg.data)
                        if data is not None:
                            out.events[r] = out.events.get(r, 0) + 1
                            events.deliver(Event(msg.rank, msg.time, data))
                    else:
                        out.dropped[r] = out.dropped.get(r, 0) + 1
                elif isinstance(msg, protocol.EventsDropped):
                    out.dropped[r] = out.dropped.get(r, 0) + msg.count
                elif isinstance(msg, protocol.PgLost):
                    out.pg_lost.add(r)
                elif isinstance(msg, protocol.Result) and r in out.pending:
                    out.pending.discard(r)
                    if msg.ok:
                        try:
                            out.results[r], mapped[r] = wire.loads_result(msg.data)
                        except BaseException as exc:  # noqa: B902 - SystemExit... in a reduce too
                            if interrupts.is_real(exc):
                                raise             # Ctrl-C pressed meanwhile: the run stops
                            fail(r, _unreadable(r, exc))
                    else:
                        fail(r, errors.failure_from_report(r, msg.data))
            if w.garbled or w.eof:
                gone.add(r)
                sel.unregister(key.fileobj)       # the conn may be closed by close()
            if w.garbled:
                out.broken.add(r)
                if r in out.pending:
                    fail(r, errors.Failure(
                        r, "ProtocolError", f"rank {r} sent the notebook a message it cannot "
                        f"decode ({w.garbled}); its connection is unusable, so the rank is "
                        "replaced", ""))
            elif w.eof:
                outputs.show(w, final=True)
                if r in out.pending:
                    fail(r, how=w.death())
                else:
                    out.broken.add(r)
        for w in ranks:
            outputs.redraw(w)                 # live lines whose redraw was due
    out.waits_kept = not gone                     # else the group drops the selector
    outputs.show_all(ranks, out_poll, final=not out.pending)
    _say_dropped(out, limits)
    # Every result is loaded: a rank whose result came through shared memory may free its
    # segment now. The others hold none: a message to them would only cost the round trip
    # (about a quarter of a trivial run's), and a rank frees what it holds at its next task.
    for r in [r for r, m in mapped.items() if m]:
        ranks[r].send(protocol.Release(task_id))
    if out.pending and not out.stuck:
        out.stuck = describe(group.source.dump_stacks(ranks, sorted(out.pending)))
    return out
