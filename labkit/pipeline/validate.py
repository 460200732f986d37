"""Check any schedule - built-in or a learner's - before it runs (layer 1: pure).

    problems = validate(schedule)          # [] when it runs to the end; else sentences, worst first
    play(schedule, cost)                   # the dataflow engine `simulate` times

A rank runs its list in order. A compute step waits for its input: F for the activations of
the stage before, B (or I) for the gradient from the stage after and for its own F, W for its
own I. A SEND is posted and does not wait (isend), unless `blocking_sends=True`: then it waits
until the peer reaches the matching RECV, which is how two gloo ranks that both `send` first
deadlock. When no rank can move and some have work left, that is a deadlock, and each stuck
stage is named with what it waits for.
"""
from labkit.i18n import tr, tr_join, trn
from labkit.pipeline.schedules import COMMS, COMPUTE, Action, Schedule

__all__ = ["validate", "ensure_valid", "ScheduleError", "play", "as_schedule"]


class ScheduleError(ValueError):
    """A schedule that cannot run: the message names the stage, the step and what it waits for."""


def _parse(a) -> Action:
    if isinstance(a, Action):
        return a
    if isinstance(a, str):                               # "F3", "B0c1", "SEND_F2"
        s = a.strip().upper()
        kind = next((k for k in COMMS + COMPUTE if s.startswith(k)), None)
        rest = s[len(kind):] if kind else ""
        mb, _, chunk = rest.partition("C")
        if kind and mb.isdigit() and (not chunk or chunk.isdigit()):
            return Action(kind, int(mb), int(chunk or 0))
    if isinstance(a, tuple) and len(a) in (2, 3) and isinstance(a[0], str):
        return Action(a[0], *[int(x) for x in a[1:]])
    raise ScheduleError(tr("{a!r} is not an action: write F(i), B(i), I(i), W(i) "
                           "(from labkit.pipeline) or strings like 'F3', 'B0'", a=a))


def as_schedule(actions, stages: int = None, microbatches: int = None, chunks: int = 1,
                name: str = "yours", layout: str = "loop") -> Schedule:
    """A Schedule from per-stage lists of actions (or strings 'F0', 'B1', ...); layout "v" puts
    parts r and 2p-1-r on rank r (chunks=2), as ZB-V does."""
    if isinstance(actions, Schedule):
        return actions
    acts = [[_parse(a) for a in stage] for stage in actions]
    if stages is None:
        stages = len(acts)
    if microbatches is None:
        microbatches = 1 + max((a.mb for s in acts for a in s), default=0)
    return Schedule(name, stages, microbatches, chunks, acts, layout)


def _structure(s: Schedule) -> list:
    """Errors that need no timing: shape, ranges, duplicates, missing work, local order."""
    p, m, v = s.stages, s.microbatches, s.chunks
    if len(s.actions) != p:
        return [tr("the schedule has {k} action lists for {p} stages: give one list per stage",
                   k=len(s.actions), p=p)]
    out = []
    explicit = any(not a.is_compute for acts in s.actions for a in acts)
    for r, acts in enumerate(s.actions):
        where, bad = {}, False
        for k, a in enumerate(acts):
            if a.kind not in COMPUTE + COMMS or not 0 <= a.mb < m or not 0 <= a.chunk < v:
                out.append(tr("stage {r}, step {k}: {a!r} is out of range (kinds {kinds}, "
                              "micro-batches 0..{last_mb}, chunks 0..{last_chunk})", r=r, k=k, a=a,
                              kinds="/".join(COMPUTE), last_mb=m - 1, last_chunk=v - 1))
                bad = True
                continue
            if a in where:
                out.append(tr("stage {r} runs {what} twice (steps {first} and {k})",
                              r=r, what=a.describe(), first=where[a], k=k))
                bad = True
            where.setdefault(a, k)
        if bad:
            continue
        for c in range(v):
            vs = s.vstage(r, c)
            for i in range(m):
                f, b, ii, w = (Action(k, i, c) for k in COMPUTE)
                if f not in where:
                    out.append(tr("stage {r} never runs {what}", r=r, what=f.describe()))
                    continue
                if b in where and (ii in where or w in where):
                    out.append(tr("stage {r} runs both B{i} and its halves I{i}/W{i}: use one or the other",
                                  r=r, i=i))
                    continue
                grads = [b] if b in where or ii not in where else [ii, w]
                for g in grads:
                    if g not in where:
                        out.append(tr("stage {r} never runs {what} (each I needs its W)", r=r, what=g.describe())
                                   if g.kind == "W" else tr("stage {r} never runs {what}", r=r, what=g.describe()))
                for g in grads:
                    if g in where and g.kind != "W" and where[g] < where[f]:
                        out.append(tr("stage {r} runs {g!r} (step {kg}) before {f!r} (step {kf}): "
                                      "a backward needs its own forward's activations",
                                      r=r, g=g, kg=where[g], f=f, kf=where[f]))
                if w in where and ii in where and where[w] < where[ii]:
                    out.append(tr("stage {r} runs {w!r} (step {kw}) before {i!r} (step {ki}): "
                                  "the weight gradient needs the output gradient that I receives",
                                  r=r, w=w, kw=where[w], i=ii, ki=where[ii]))
                if explicit:
                    out += _comm_structure(s, r, c, vs, i, where, grads[0].kind)
    return out


def _comm_structure(s, r, c, vs, i, where, gkind) -> list:
    out, last = [], s.virtual_stages - 1
    need = []
    if vs > 0 and s.place(vs - 1, c)[0] != r:
        need += [(Action("RECV_F", i, c), Action("F", i, c), True),
                 (Action("SEND_B", i, c), Action(gkind, i, c), False)]
    if vs < last and s.place(vs + 1, c)[0] != r:
        need += [(Action("SEND_F", i, c), Action("F", i, c), False),
                 (Action("RECV_B", i, c), Action(gkind, i, c), True)]
    for comm, compute, before in need:
        if comm not in where:
            out.append(tr("stage {r} never runs {what}, which {compute!r} needs before it", r=r,
                          what=comm.describe(), compute=compute) if before else
                       tr("stage {r} never runs {what}, which {compute!r} must pass on after it", r=r,
                          what=comm.describe(), compute=compute))
        elif before and where[comm] > where[compute]:
            out.append(tr("stage {r} runs {compute!r} (step {k1}) before {comm!r} (step {k2}): "
                          "receive the input first", r=r, compute=compute, k1=where[compute],
                          comm=comm, k2=where[comm]))
        elif not before and where[comm] < where[compute]:
            out.append(tr("stage {r} runs {comm!r} (step {k1}) before {compute!r} (step {k2}): "
                          "nothing to send yet", r=r, comm=comm, k1=where[comm], compute=compute,
                          k2=where[compute]))
    return out


def _needs(s: Schedule, r: int, a: Action, explicit: bool, split: set) -> list:
    """[(rank, action, crosses)] that must be done before rank r can run a."""
    vs, last = s.vstage(r, a.chunk), s.virtual_stages - 1
    grad = lambda rr, cc: Action("I" if (rr, a.mb, cc) in split else "B", a.mb, cc)   # noqa: E731
    if a.kind == "F":
        if vs == 0:
            return []
        pr, pc = s.place(vs - 1, a.chunk)
        if explicit and pr != r:
            return [(r, Action("RECV_F", a.mb, a.chunk), False)]
        return [(pr, Action("F", a.mb, pc), pr != r)]
    if a.kind in ("B", "I"):
        own = [(r, Action("F", a.mb, a.chunk), False)]
        if vs == last:
            return own
        nr, nc = s.place(vs + 1, a.chunk)
        if explicit and nr != r:
            return own + [(r, Action("RECV_B", a.mb, a.chunk), False)]
        return own + [(nr, grad(nr, nc), nr != r)]
    if a.kind == "W":
        return [(r, Action("I", a.mb, a.chunk), False)]
    if a.kind in ("SEND_F", "SEND_B"):
        return [(r, Action("F", a.mb, a.chunk) if a.kind == "SEND_F" else grad(r, a.chunk), False)]
    return [_peer_send(s, r, a) + (True,)]


def _peer_send(s: Schedule, r: int, a: Action) -> tuple:
    vs = s.vstage(r, a.chunk)
    pr, pc = s.place(vs - 1 if a.kind == "RECV_F" else vs + 1, a.chunk)
    return pr, Action("SEND_F" if a.kind == "RECV_F" else "SEND_B", a.mb, pc)


def play(s: Schedule, cost=lambda r, a: 1.0, send: float = 0.0, blocking_sends: bool = False):
    """Run the schedule as a dataflow, every action as early as its inputs allow.

    cost(rank, action) -> seconds of compute; `send`: seconds from the producer's end to the
    consumer's start when they are on different ranks (or a function (producer rank, producer
    action) -> seconds). Returns (intervals, stuck):
    intervals[r] = [(start, end, action)], stuck = {rank: (step, action, waits_for)}."""
    explicit = any(not a.is_compute for acts in s.actions for a in acts)
    split = {(r, a.mb, a.chunk) for r, acts in enumerate(s.actions) for a in acts if a.kind == "I"}
    lag = send if callable(send) else (lambda r, a: send)
    done, clock, pc = {}, [0.0] * s.stages, [0] * s.stages
    out = [[] for _ in range(s.stages)]

    def finish(r, a, t0, t1):
        out[r].append((t0, t1, a))
        done[(r, a)] = t1
        clock[r], pc[r] = t1, pc[r] + 1

    moved = True
    while moved:
        moved = False
        for r in range(s.stages):
            while pc[r] < len(s.actions[r]):
                a = s.actions[r][pc[r]]
                deps = _needs(s, r, a, explicit, split)
                if any((dr, da) not in done for dr, da, _ in deps):
                    break
                ready = max([clock[r]] + [done[(dr, da)] + (lag(dr, da) if x else 0.0) for dr, da, x in deps])
                if a.kind.startswith("SEND") and blocking_sends:
                    pr, peer = _peer_recv(s, r, a)
                    if pc[pr] >= len(s.actions[pr]) or s.actions[pr][pc[pr]] != peer:
                        break                                        # rendezvous: wait for the RECV
                    t0 = max(ready, clock[pr])
                    finish(r, a, t0, t0 + lag(r, a))
                    finish(pr, peer, t0, t0 + lag(r, a))
                elif a.kind.startswith("SEND"):
                    finish(r, a, ready, ready)                       # posted, returns at once
                else:
                    finish(r, a, ready, ready + (cost(r, a) if a.is_compute else 0.0))
                moved = True
    stuck = {}
    for r in range(s.stages):
        if pc[r] < len(s.actions[r]):
            a = s.actions[r][pc[r]]
            if a.kind.startswith("SEND") and blocking_sends:
                pr, peer = _peer_recv(s, r, a)
                stuck[r] = (pc[r], a, [(pr, peer)])
            else:
                stuck[r] = (pc[r], a, [(dr, da) for dr, da, _ in _needs(s, r, a, explicit, split)
                                       if (dr, da) not in done])
    return out, stuck


def _peer_recv(s, r, a):
    vs = s.vstage(r, a.chunk)
    pr, pc = s.place(vs + 1 if a.kind == "SEND_F" else vs - 1, a.chunk)
    return pr, Action("RECV_F" if a.kind == "SEND_F" else "RECV_B", a.mb, pc)


def _deadlock(s: Schedule, stuck: dict) -> list:
    lines = []
    for r, (k, a, waits) in sorted(stuck.items()):
        for wr, wa in waits[:1]:
            if wr == r:
                lines.append(tr("stage {r} waits at step {k} ({a!r}) for its own {wa!r}, which comes later",
                                r=r, k=k, a=a, wa=wa))
                continue
            at = stuck.get(wr)
            there = (tr("stage {wr} is itself stuck at step {k} ({a!r})", wr=wr, k=at[0], a=at[1]) if at else
                     tr("stage {wr} has finished", wr=wr))
            if wa.kind.startswith("RECV"):
                lines.append(tr("stage {r} waits at step {k} ({a!r}) until stage {wr} reaches the matching "
                                "{wa!r}; {there}", r=r, k=k, a=a, wr=wr, wa=wa, there=there))
            else:
                lines.append(tr("stage {r} waits at step {k} ({a!r}) for {wa!r} on stage {wr}; {there}",
                                r=r, k=k, a=a, wa=wa, wr=wr, there=there))
    n, waits = len(stuck), tr_join(lines, "; ")
    if any(a.kind.startswith("SEND") for _, a, _ in stuck.values()):
        return [trn("deadlock: {n} stage can never move: {waits} (a blocking send waits for its receive: "
                    "post each send together with the receive it pairs with, isend/irecv or "
                    "batch_isend_irecv)",
                    "deadlock: {n} stages can never move: {waits} (a blocking send waits for its receive: "
                    "post each send together with the receive it pairs with, isend/irecv or "
                    "batch_isend_irecv)", n, waits=waits)]
    return [trn("deadlock: {n} stage can never move: {waits}",
                "deadlock: {n} stages can never move: {waits}", n, waits=waits)]


def validate(schedule, blocking_sends: bool = False) -> list:
    """Problems of a schedule as sentences, the first one first; [] if it runs to the end.

    Checks one list per stage, ranges, every F and B (or I and W) exactly once per micro-batch
    and chunk, each backward after its own forward, explicit SEND/RECV where present, and then
    plays it to find deadlocks ("stage 1 waits at step 3 (F2) for F2 on stage 0; ...")."""
    try:
        s = as_schedule(schedule)
    except ScheduleError as exc:
        return [str(exc)]
    problems = _structure(s)
    if problems:
        return problems
    _, stuck = play(s, blocking_sends=blocking_sends)
    return _deadlock(s, stuck) if stuck else []


def ensure_valid(schedule, blocking_sends: bool = False) -> Schedule:
    """The schedule as a Schedule, or ScheduleError with every problem."""
    problems = validate(schedule, blocking_sends)
    if problems:
        raise ScheduleError(tr("this schedule cannot run:") + "\n- " + "\n- ".join(problems))
    return as_schedule(schedule)
