"""From the messages the learner's ring sent (ring_watch's log) to a sentence about its mistake.

Pure Python on logs of (kind, peer, start, numel, on_group): `kind` is send/isend/recv/irecv,
`peer` a group rank, `start` where the message began in the tensor (None for a separate
buffer), `on_group` whether it was posted on the group rather than the whole world.
The schedule compared with is `labkit.comm.formulas.ring_schedule`, the one every ring in
labkit follows.
"""
from labkit.comm.formulas import chunk_bounds, ring_schedule


def stuck_in(where: str) -> str:
    """'in recv()' from a stuck rank's stack: its first line, without the traceback's
    "(most recent call last):"."""
    return where.splitlines()[0].replace(" (most recent call last):", "").rstrip(":") if where else ""


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
    return (f"rank {rank} never sends elements {missing[0]}..{missing[-1]} of {length}: chunks cut "
            f"with numel // n ({length} // {k} = {length // k}) leave out the last numel % n "
            f"= {length % k}; cut with chunk_bounds(numel, n) (sizes differ by at most one)")


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
        where = f"rank {r}, send {s + 1} ({st.phase} step {st.step + 1})"
        if s >= len(sends):
            if partial:
                return ""
            n_rs = sum(st.phase == "reduce-scatter" for st in want)
            if len(sends) == n_rs and summed:
                return (f"rank {r} made the reduce-scatter's {n_rs} sends and no all-gather: after "
                        "the reduce-scatter each rank holds only its own summed chunk; the "
                        f"all-gather's n - 1 = {k - 1} steps pass the summed chunks around the ring")
            return (f"rank {r} made {len(sends)} non-empty sends, the ring needs {len(want)} here "
                    f"({k - 1} reduce-scatter + {k - 1} all-gather steps): a step is missing")
        c = chunk_index(sends[s], bounds)
        if c == -1:
            a = sends[s][2]
            return (f"{where}: sent elements {a}..{a + sends[s][3] - 1}, which is not one of the "
                    f"ring's chunks (chunk_bounds({length}, {k}) = {bounds})")
        if c is not None and c != st.send:
            text = f"{where}: sent chunk {c}, the ring sends chunk {st.send} at this step"
            if st.phase == "all-gather":
                own = ring_schedule(r, k, shift)[k - 2].recv      # the last reduce-scatter step's
                return text + (f": after your reduce-scatter rank {r} holds the whole sum of chunk "
                               f"{own}, so the all-gather sends that chunk first, then at each step "
                               "the chunk it received the step before")
            before = ring_schedule(r, k, shift)[st.step - 1].recv if st.step else None
            return text + (f": at each reduce-scatter step a rank passes on the chunk it added "
                           f"into the step before (chunk {before})" if st.step else "")
    if len(sends) > len(want):
        return f"rank {r}: {len(sends)} sends, the ring needs {len(want)}"
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
        return (f"the sum is right, but rank {r} sent no point-to-point message: the exercise is "
                "to build the all-reduce from isend/irecv (or send/recv), not to call a collective")
    if sent <= need:
        return ""
    return (f"the sum is right, but rank {r} sent {sent} elements in {len(sends)} messages where "
            f"the ring sends {need} ({k - 1} reduce-scatter + {k - 1} all-gather steps of one "
            "chunk each): a step too many? Each phase has n - 1 steps (range(n - 1))")


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
                return (f"rank {a} posted {len(sends)} sends to rank {b}, which posted "
                        f"{len(recvs)} receives from rank {a}")
    return ""


def size_clash(logs: dict, k: int, length: int) -> str:
    """The first message whose size differs from the recv it met (i-th send from a to b meets
    the i-th recv posted by b from a), as a sentence, or ''."""
    bounds = chunk_bounds(length, k)

    def what(e):
        c = chunk_index(e, bounds)
        return f"chunk {c} ({e[3]} elements)" if c not in (None, -1) else f"a buffer of {e[3]} elements"
    for dst in range(k):
        for src in range(k):
            sends = [e for e in logs.get(src, []) if e[0].endswith("send") and e[1] == dst]
            recvs = [e for e in logs.get(dst, []) if e[0].endswith("recv") and e[1] == src]
            for i, (a, b) in enumerate(zip(sends, recvs)):
                if a[3] != b[3]:
                    return (f"rank {src} sent {what(a)} to rank {dst}, whose matching recv "
                            f"(its message {i + 1} from rank {src}) was into {what(b)}")
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
            parts.append(f"rank {r} finished its part and waits for the others")
            continue
        posted = logs.get(r, [])
        msg = (f"its last message, number {len(posted)}, was {posted[-1][0]} "
               f"{'to' if posted[-1][0].endswith('send') else 'from'} rank {posted[-1][1]}"
               if posted else "no message posted")
        at = frame_of(where)
        parts.append(f"rank {r} waits {stuck_in(where)}" + (f" at {at}" if at else "") + f" ({msg})")
    head = f"hung (world size {k}, length {length}, {dtype})" if k else "hung"
    text = head + ": " + "; ".join(parts)
    mine = {r: v for r, v in logs.items() if k is None or r in case}
    dropped = [e.data["dropped"] for e in events if "dropped" in e.data]
    if dropped:
        return text + ". " + dropped[0][0].upper() + dropped[0][1:]
    last = [mine[r][-1][0] for r in stuck if mine.get(r)]
    if last and all(kind in ("send", "recv") for kind in last):
        return text + (". A blocking send or recv waits for the other side, and every rank "
                       "started with the same one: post them with isend/irecv, then wait on both")
    pair = unmatched(mine)
    if pair:
        return text + f". {pair}: every send needs a matching receive on the other side"
    return text + (". Every rank waits for a message no one sends: post the step's irecv and "
                   "isend before waiting on either")
