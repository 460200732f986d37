"""From the messages the learner's ring sent (ring_watch's log) to a sentence about its mistake.

Pure Python on logs of (kind, peer, start, numel, on_group): `kind` is send/isend/recv/irecv,
`peer` a group rank, `start` where the message began in the tensor (None for a separate
buffer), `on_group` whether it was posted on the group rather than the whole world.
The schedule compared with is `labkit.comm.formulas.ring_schedule`, the one every ring in
labkit follows.
"""
import re

from labkit.comm.formulas import chunk_bounds, ring_schedule
from labkit.i18n import tr, tr_join


def stuck_in(where: str) -> str:
    """'in recv()' from a stuck rank's stack: its first line, without the traceback's
    "(most recent call last):" (or its translation, in brackets before the colon)."""
    if not where:
        return ""
    return re.sub(r"\s*[(（][^()（）]*[)）]\s*[:：]\s*$", "", where.splitlines()[0]).rstrip(":：")


def _sends(log):
    return [e for e in log if e[0].endswith("send")]


def chunk_index(entry, bounds):
    """Which chunk a logged message is exactly, None for a separate buffer, -1 for a slice
    that is not one of the chunks."""
    start, numel = entry[2], entry[3]
    if start is None:
        return None
    return next((c for c, (a, b) in enumerate(bounds) if (a, b) == (start, start + numel)), -1)


def uncovered(log, length):
    """Elements of the tensor that none of this rank's sends carried, if every send was a slice
    of the tensor (a ring's sends cover it all); else []."""
    sends = _sends(log)
    if not sends or any(e[2] is None for e in sends):
        return []
    seen = [False] * length
    for _, _, start, numel, *_ in sends:
        for i in range(start, min(start + numel, length)):
            seen[i] = True
    return [i for i, s in enumerate(seen) if not s]


def dropped_remainder(log, rank, k, length) -> str:
    """'elements 6..6 never sent' when the chunks were cut with numel // n (every send is
    numel // n long and the last numel % n elements were never sent), or ''."""
    q = length // k
    missing = uncovered(log, length)
    if not missing or missing != list(range(k * q, length)) or \
            any(e[3] != q for e in _sends(log)):            # not the floor cut's pattern
        return ""
    return tr("rank {rank} never sends elements {a}..{b} of {length}: chunks cut with numel // n "
              "({length} // {k} = {q}) leave out the last numel % n = {rest}; cut with "
              "chunk_bounds(numel, n) (sizes differ by at most one)", rank=rank, a=missing[0],
              b=missing[-1], length=length, k=k, q=length // k, rest=length % k)


def schedule(log, r, k, length, partial=False, summed=False) -> str:
    """First step where rank r's sends leave the ring schedule, as a sentence, or ''.
    The learner may have rotated the chunks (rank r ending with chunk r + shift): the shift
    is read from the first send. partial: the rank stopped early, missing sends are no finding.
    summed: a chunk of the tensor holds the right sum (so the reduce-scatter worked)."""
    bounds = chunk_bounds(length, k)
    sizes = [b - a for a, b in bounds]
    sends = _sends(log)
    first = chunk_index(sends[0], bounds) if sends else None
    shifts = [s for s in range(k) if [st.send for st in ring_schedule(r, k, s) if sizes[st.send]][:1] == [first]]
    shift = shifts[0] if shifts else 0
    want = [st for st in ring_schedule(r, k, shift) if sizes[st.send]]
    for s, st in enumerate(want):
        where = tr("rank {r}, send {s} ({phase} step {step})", r=r, s=s + 1, phase=st.phase,
                   step=st.step + 1)
        if s >= len(sends):
            if partial:
                return ""
            n_rs = sum(st.phase == "reduce-scatter" for st in want)
            if len(sends) == n_rs and summed:
                return tr("rank {r} made the reduce-scatter's {n_rs} sends and no all-gather: "
                          "after the reduce-scatter each rank holds only its own summed chunk; "
                          "the all-gather's n - 1 = {steps} steps pass the summed chunks around "
                          "the ring", r=r, n_rs=n_rs, steps=k - 1)
            return tr("rank {r} made {sent} non-empty sends, the ring needs {need} here ({steps} "
                      "reduce-scatter + {steps} all-gather steps): a step is missing", r=r,
                      sent=len(sends), need=len(want), steps=k - 1)
        c = chunk_index(sends[s], bounds)
        if c == -1:
            a = sends[s][2]
            return tr("{where}: sent elements {a}..{b}, which is not one of the ring's chunks "
                      "(chunk_bounds({length}, {k}) = {bounds})", where=where, a=a,
                      b=a + sends[s][3] - 1, length=length, k=k, bounds=bounds)
        if c is not None and c != st.send:
            if st.phase == "all-gather":
                own = ring_schedule(r, k, shift)[k - 2].recv      # the last reduce-scatter step's
                return tr("{where}: sent chunk {c}, the ring sends chunk {want} at this step: after "
                          "your reduce-scatter rank {r} holds the whole sum of chunk {own}, so the "
                          "all-gather sends that chunk first, then at each step the chunk it "
                          "received the step before", where=where, c=c, want=st.send, r=r, own=own)
            if not st.step:
                return tr("{where}: sent chunk {c}, the ring sends chunk {want} at this step",
                          where=where, c=c, want=st.send)
            return tr("{where}: sent chunk {c}, the ring sends chunk {want} at this step: at each "
                      "reduce-scatter step a rank passes on the chunk it added into the step before "
                      "(chunk {before})", where=where, c=c, want=st.send,
                      before=ring_schedule(r, k, shift)[st.step - 1].recv)
    if len(sends) > len(want):
        return tr("rank {r}: {sent} sends, the ring needs {need}", r=r, sent=len(sends),
                  need=len(want))
    return ""


def extra_bytes(log, r, k, length) -> str:
    """'rank r sent 9 elements where the ring sends 7 ...' when a ring that got the right sum
    sent more than the ring's 2(N-1) chunks (a step too many), or nothing at all (a collective
    called instead), or ''."""
    sizes = [b - a for a, b in chunk_bounds(length, k)]
    need = max(sum(sizes[st.send] for st in ring_schedule(r, k, shift)) for shift in range(k))
    sends = _sends(log)
    sent = sum(e[3] for e in sends)
    if not sends and need:
        return tr("the sum is right, but rank {r} sent no point-to-point message: the exercise "
                  "is to build the all-reduce from isend/irecv (or send/recv), not to call a "
                  "collective", r=r)
    if sent <= need:
        return ""
    return tr("the sum is right, but rank {r} sent {sent} elements in {messages} messages where "
              "the ring sends {need} ({steps} reduce-scatter + {steps} all-gather steps of one "
              "chunk each): a step too many? Each phase has n - 1 steps (range(n - 1))", r=r,
              sent=sent, messages=len(sends), need=need, steps=k - 1)


def leftovers(logs: dict) -> dict:
    """Messages posted that nothing met: {rank: [(kind, peer, numel, on_group)]}, the calls each
    rank must make so that every one of them is met (a recv for an unmet send, and back)."""
    todo = {}
    for a in sorted(logs):
        for b in sorted(logs):
            sends = [e for e in logs[a] if e[0].endswith("send") and e[1] == b]
            recvs = [e for e in logs[b] if e[0].endswith("recv") and e[1] == a]
            for e in sends[len(recvs):]:
                todo.setdefault(b, []).append(("recv", a, e[3], e[4]))
            for e in recvs[len(sends):]:
                todo.setdefault(a, []).append(("send", b, e[3], e[4]))
    return todo


def unmatched(logs: dict) -> str:
    """The first pair of ranks where the sends from one and the receives posted by the other
    differ in number, as a sentence, or '' when every message met its receive."""
    ranks = sorted(logs)
    for a in ranks:
        for b in ranks:
            sends = [e for e in logs[a] if e[0].endswith("send") and e[1] == b]
            recvs = [e for e in logs.get(b, []) if e[0].endswith("recv") and e[1] == a]
            if len(sends) != len(recvs):
                return tr("rank {a} posted {sends} sends to rank {b}, which posted {recvs} "
                          "receives from rank {a}", a=a, b=b, sends=len(sends), recvs=len(recvs))
    return ""


def size_clash(logs: dict, k: int, length: int) -> str:
    """The first message whose size differs from the recv it met (i-th send from a to b meets
    the i-th recv posted by b from a), as a sentence, or ''."""
    bounds = chunk_bounds(length, k)

    def what(e):
        c = chunk_index(e, bounds)
        return tr("chunk {c} ({n} elements)", c=c, n=e[3]) if c not in (None, -1) else \
            tr("a buffer of {n} elements", n=e[3])
    for dst in range(k):
        for src in range(k):
            sends = [e for e in logs.get(src, []) if e[0].endswith("send") and e[1] == dst]
            recvs = [e for e in logs.get(dst, []) if e[0].endswith("recv") and e[1] == src]
            for i, (a, b) in enumerate(zip(sends, recvs)):
                if a[3] != b[3]:
                    return tr("rank {src} sent {what} to rank {dst}, whose matching recv (its "
                              "message {i} from rank {src}) was into {into}", src=src, dst=dst,
                              what=what(a), i=i + 1, into=what(b))
    return ""


def case_logs(events):
    """The last case each rank started and the messages it posted in it, from emitted events."""
    case, logs = {}, {}
    for e in events:
        if "case" in e.data and e.data["case"] is None:     # a rank outside the case's group
            case.pop(e.rank, None)
            logs.pop(e.rank, None)
        elif "case" in e.data:
            case[e.rank], logs[e.rank] = e.data["case"], []
        elif "p2p" in e.data:
            logs.setdefault(e.rank, []).append(tuple(e.data["p2p"]))
    return case, logs


def hang(stuck: dict, events, frame_of) -> str:
    """Which case hung, where each rank waits, and why, for a RankTimeout. frame_of(where)
    gives the learner's line of a stuck rank's stack."""
    case, logs = case_logs(events)
    k, length, dtype = next(iter(case.values()), (None, None, None))
    parts = []
    for r, where in sorted(stuck.items()):
        if k is not None and r not in case:
            continue                            # outside the group: it only waits for it
        if "in settle()" in where.splitlines()[0]:
            parts.append(tr("rank {r} finished its part and waits for the others", r=r))
            continue
        posted = logs.get(r, [])
        msg = ((tr("its last message, number {n}, was {kind} to rank {peer}", n=len(posted),
                   kind=posted[-1][0], peer=posted[-1][1]) if posted[-1][0].endswith("send") else
                tr("its last message, number {n}, was {kind} from rank {peer}", n=len(posted),
                   kind=posted[-1][0], peer=posted[-1][1]))
               if posted else tr("no message posted"))
        at = frame_of(where)
        parts.append(tr("rank {r} waits {where} at {at} ({msg})", r=r, where=stuck_in(where),
                        at=at, msg=msg) if at else
                     tr("rank {r} waits {where} ({msg})", r=r, where=stuck_in(where), msg=msg))
    waits = tr_join(parts, "; ")
    text = tr("hung (world size {k}, length {length}, {dtype}): {waits}", k=k, length=length,
              dtype=dtype, waits=waits) if k else tr("hung: {waits}", waits=waits)
    mine = {r: v for r, v in logs.items() if k is None or r in case}
    dropped = [e.data["dropped"] for e in events if "dropped" in e.data]
    if dropped:
        return tr("{hung}. {sentence}", hung=text, sentence=dropped[0][0].upper() + dropped[0][1:])
    last = [mine[r][-1][0] for r in stuck if mine.get(r)]
    if last and all(kind in ("send", "recv") for kind in last):
        return tr("{hung}. A blocking send or recv waits for the other side, and every rank "
                  "started with the same one: post them with isend/irecv, then wait on both", hung=text)
    pair = unmatched(mine)
    if pair:
        return tr("{hung}. {pair}: every send needs a matching receive on the other side",
                  hung=text, pair=pair)
    return tr("{hung}. Every rank waits for a message no one sends: post the step's irecv and "
              "isend before waiting on either", hung=text)
