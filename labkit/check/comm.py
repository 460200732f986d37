"""Checker for notebook 02: the learner's ring all-reduce.

    labkit.check.ring_all_reduce(my_ring)    # my_ring(tensor, group=None): sum in place

It runs `fn` on sub-groups of 2, 3 and 4 ranks (as many as the cluster has) with awkward
lengths (shorter than the world size, not divisible by it) and dtypes, compares `tensor`
itself (the exercise is in place) with `dist.all_reduce`, and watches every point-to-point
call the learner makes (ring_watch), so a wrong answer is reported with its cause: the first
rank, step and chunk that left the ring's schedule (formulas.ring_schedule), elements never
sent, a buffer of the wrong dtype, the world's size used in a group, a wrong neighbour, or,
for a hang, where each rank waits and why.
"""
import torch

from labkit.check.core import caught_verdict, checker, new_token, _learner_frame
from labkit.check.guard import HANG_LIMIT_S
from labkit.i18n import tr, tr_join, trn

__all__ = ["ring_all_reduce"]

_LENGTHS = [7, 3, 1, 1001]      # 7 first: every chunk non-empty, so a diagnosis names real steps
_DTYPES = ["float32", "int64", "bfloat16", "float64"]
_groups = {}            # group size -> process group of ranks 0..k-1, kept on each rank between
                        # checks; "shifted": ranks 1..world-1, where a group rank is not the global
                        # one (dst= where group_dst= is meant); "world": the default group


def _wrong_values(t, x, out, expected, log, rank, k, length, dt):
    """Why `t` (the argument after the call; x before it) is not the sum, or '' if it is."""
    from labkit.check import ring_diagnosis as why
    from labkit.comm.formulas import chunk_bounds
    tol = 0 if not dt.is_floating_point else 4 * k * torch.finfo(dt).eps
    bad = ((t.double() - expected.double()).abs() > tol * (1 + expected.double().abs())).nonzero()
    if not len(bad):
        return ""
    if torch.equal(t, x):
        fresh = isinstance(out, torch.Tensor) and out.data_ptr() != t.data_ptr()
        if fresh:
            return tr("rank {rank}: your function left `tensor` unchanged and returned a new tensor: "
                      "the exercise asks for an in-place all-reduce (write the sum into `tensor`, for "
                      "example through the views flat[a:b] of flat = tensor.view(-1))", rank=rank)
        return tr("rank {rank}: your function left `tensor` unchanged: the exercise asks for an "
                  "in-place all-reduce (write the sum into `tensor`, for example through the views "
                  "flat[a:b] of flat = tensor.view(-1))", rank=rank)
    i = bad[0].item()
    bounds = chunk_bounds(length, k)
    chunk = next(c for c, (a, b) in enumerate(bounds) if a <= i < b)
    text = tr("rank {rank}, chunk {chunk} (element {i}) is {got:.6g}, expected {want:.6g}",
              rank=rank, chunk=chunk, i=i, got=t[i].item(), want=expected[i].item())
    summed = any(b > a and not len([j for j in bad.flatten().tolist() if a <= j < b])
                 for a, b in bounds)
    cause = why.dropped_remainder(log, rank, k, length) or \
        why.schedule(log, rank, k, length, summed=summed)
    return tr_join([text, cause or _arithmetic(t, x, expected, bounds, rank, k, tol)], "; ")


def _arithmetic(t, x, expected, bounds, rank, k, tol) -> str:
    """Why the values are wrong when the messages follow the ring's schedule."""
    def close(a, b):
        return bool(((a.double() - b.double()).abs() <= tol * (1 + b.double().abs())).all())
    if t.is_floating_point() and close(t * k, expected):
        return tr("every value is the sum divided by {k}, the mean: the exercise asks for the "
                  "sum (what dist.all_reduce does by default); leave the division out", k=k)
    for c, (a, b) in enumerate(bounds):
        if b > a and torch.equal(t[a:b], x[a:b]) and not close(x[a:b], expected[a:b]):
            return tr("chunk {c} on rank {rank} still holds this rank's own input: what arrived "
                      "was never added into it. In the reduce-scatter add in place, `recv += "
                      "incoming` (`recv = recv + incoming` only makes a new tensor; a copy "
                      "replaces instead of adding)", c=c, rank=rank)
    return tr("the sends follow the ring schedule, so check the arithmetic: add in "
              "reduce-scatter, copy in all-gather")


def _chunk_hint(caught, k, length) -> str:
    if caught.type == "IndexError" and len(torch.empty(length).chunk(k)) < k:
        m = len(torch.empty(length).chunk(k))
        return trn("tensor.chunk({k}) makes only {n} chunk of a length-{length} tensor (chunks of "
                   "ceil(length / n) elements, no empty ones): cut with chunk_bounds(numel, n), which "
                   "always makes n chunks, some of them empty",
                   "tensor.chunk({k}) makes only {n} chunks of a length-{length} tensor (chunks of "
                   "ceil(length / n) elements, no empty ones): cut with chunk_bounds(numel, n), which "
                   "always makes n chunks, some of them empty", m, k=k, length=length)
    return ""


def _case(fn, rank, k, length, dtype, key, world):
    """Run fn once on this rank (in the group _groups[key] of k ranks): {case, k, key, rank
    (global), grank (in the group), log (its messages, peers in group ranks), and text (what is
    wrong, '' if nothing) or caught (what fn raised)}. Diagnoses name group ranks."""
    import torch.distributed as dist
    import labkit
    from labkit.check import guard, ring_watch
    group, first = _groups[key], world - k if key == "shifted" else 0
    glob, rank = rank, rank - first         # diagnoses speak of the rank in the group
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(7919 * length + 31 * k + rank)
    x = torch.randint(-20, 20, (length,), generator=g).to(dt) if not dt.is_floating_point \
        else torch.randn(length, generator=g, dtype=torch.float32).to(dt)
    expected = x.clone()
    dist.all_reduce(expected, group=group)
    t, log, notes = x.clone(), [], []
    labkit.emit(case=[k, length, dtype])
    with ring_watch.watch(t, group, k, world, log, notes, labkit.emit):
        out, caught = guard.attempt(fn, t, group=group)
    case = tr("world size {k}, length {length}, {dtype}", k=k, length=length, dtype=dtype)
    if first:
        case = tr("a group of {k} ranks, global ranks {first}..{last} (rank r of the group is "
                  "global rank r + {first}), length {length}, {dtype}", k=k, first=first,
                  last=world - 1, length=length, dtype=dtype)
    found = {"case": case, "k": k, "key": key, "rank": glob, "grank": rank, "log": log,
             "dtype": dtype}
    if caught is not None and caught.type == "RingMistake":
        return dict(found, text=caught.message)
    if caught is not None:
        caught.hint = _chunk_hint(caught, k, length)
        return dict(found, caught=caught)
    if notes:
        return dict(found, text=notes[0])
    text = _wrong_values(t, x, out, expected, log, rank, k, length, dt)
    from labkit.check import ring_diagnosis as why
    return dict(found, text=text or why.extra_bytes(log, rank, k, length))


def _setup():
    """On every rank: make the sub-groups and send one message around each ring (its first
    messages connect, seconds on a busy machine), outside the time the learner's ring gets."""
    import torch.distributed as dist
    import labkit
    from labkit.comm.ring import ring_all_reduce_simple
    rank, world = labkit.rank(), labkit.world_size()
    if _groups.get("world") is not dist.group.WORLD:    # the process group was rebuilt: new groups
        _groups.clear()
        _groups["world"] = dist.group.WORLD
    for k in range(2, min(4, world) + 1):
        if k not in _groups:
            _groups[k] = None if k == world else dist.new_group(list(range(k)))
            if rank < k:
                ring_all_reduce_simple(torch.ones(k), group=_groups[k])
    if world > 2 and "shifted" not in _groups:
        _groups["shifted"] = dist.new_group(list(range(1, world)))
        if rank >= 1:
            ring_all_reduce_simple(torch.ones(world - 1), group=_groups["shifted"])


def _cases(world):
    """(key, k, length, dtype) in the order they run: groups of ranks 0..k-1, then one case on
    ranks 1..world-1, where group and global ranks differ."""
    out = [(k, k, length, dtype) for k in range(2, min(4, world) + 1)
           for length in _LENGTHS for dtype in _DTYPES]
    return out + ([("shifted", world - 1, 7, "float32")] if world > 2 else [])


def _drive(fn, token):
    """On every rank: every case in the same order; all ranks stop at the first case where
    any rank saw a problem (none is left waiting). Returns what _case found in that case on
    this rank (None outside its group, or when every case passed)."""
    import labkit
    from labkit.check import guard, ring_watch
    rank, world = labkit.rank(), labkit.world_size()
    ring_watch.UNWAITED[:] = [w for w in ring_watch.UNWAITED if not w.is_completed()]   # done: let go
    for key, k, length, dtype in _cases(world):
        inside = rank >= world - k if key == "shifted" else rank < k
        if not inside:
            labkit.emit(case=None)              # not in this case (ring_diagnosis.case_logs)
        mine = _case(fn, rank, k, length, dtype, key, world) if inside else None
        flag = mine and (mine.get("caught") or mine["text"] or None)
        if any(guard.settle(token, f"{key}/{length}/{dtype}", flag)):
            return mine
    return None


def _drain(todo, key, dtype):
    """On every rank: post the receives (and sends) that meet the messages the learner's ring
    left unmet when it stopped half-way, so no stale message reaches a later run. todo is keyed
    by global rank, its peers are ranks of the group _groups[key]."""
    import torch.distributed as dist
    import labkit
    works = []
    ring = _groups.get(key)
    for kind, peer, numel, on_group in todo.get(labkit.rank(), []):
        if not on_group and ring is not None:   # posted on the whole world: a global rank
            peer = dist.get_global_rank(ring, peer)
        buf = torch.zeros(numel, dtype=getattr(torch, dtype))
        post = dist.irecv if kind == "recv" else dist.isend
        works.append(post(buf, group=ring if on_group else None,
                          **{"group_src" if kind == "recv" else "group_dst": peer}))
    for w in works:
        w.wait()
    from labkit.check import ring_watch
    for w in ring_watch.UNWAITED:         # the learner's own requests, met now
        w.wait()
    ring_watch.UNWAITED.clear()


def _tidy(cluster, found) -> None:
    """A ring that stopped half-way (it raised) can leave a message posted that no receive
    met; the next run would receive it. Meet those messages now, or start fresh ranks."""
    import labkit
    from labkit.check.ring_diagnosis import leftovers
    todo = leftovers({p["grank"]: p["log"] for p in found})       # in group ranks
    glob = {p["grank"]: p["rank"] for p in found}
    todo = {glob[r]: calls for r, calls in todo.items()}
    if todo:
        try:
            cluster.run(_drain, todo, found[0]["key"], found[0]["dtype"], timeout=3)
        except labkit.RankError:
            cluster.restart()


@checker("ring_all_reduce")
def ring_all_reduce(fn, cluster, timeout: float = HANG_LIMIT_S):
    """fn(tensor, group=None) must sum `tensor` over the ranks of `group`, in place."""
    import labkit
    from labkit.check import ring_diagnosis as why
    try:
        cluster.run(_setup, timeout=120)
        results = cluster.run(_drive, fn, new_token(timeout), timeout=timeout)
    except labkit.RankError as exc:
        stuck = exc.stuck
        if exc.failures and any(f.type == "RankDied" for f in exc.failures.values()):
            return False, _describe_crash(exc, cluster.events)
        if isinstance(exc, labkit.RankTimeout):
            return False, why.hang(stuck, cluster.events, _learner_frame)
        raise
    found = [p for p in results if p]
    if not found:
        w = cluster.world_size
        sizes = ", ".join(str(k) for k in range(2, min(4, w) + 1))
        lengths, dtypes = ", ".join(map(str, _LENGTHS)), ", ".join(_DTYPES)
        if w > 2:
            return True, tr("world sizes {sizes} and {k} on global ranks 1..{k}; lengths {lengths}; "
                            "{dtypes}", sizes=sizes, k=w - 1, lengths=lengths, dtypes=dtypes)
        return True, tr("world sizes {sizes}; lengths {lengths}; {dtypes}", sizes=sizes,
                        lengths=lengths, dtypes=dtypes)
    _tidy(cluster, found)
    if any(p.get("caught") for p in found):
        return False, tr("{case}: {problem}", case=found[0]["case"],
                         problem=caught_verdict([p.get("caught") for p in found]))
    p = min((p for p in found if p["text"]), key=lambda p: p["grank"])
    return False, tr("{case}: {problem}", case=p["case"], problem=p["text"])


def _describe_crash(exc, events):
    """A rank's process died inside the learner's ring (gloo aborts when a message and the
    receive it matched differ in size): say which, where, and what its schedule got wrong."""
    from labkit.check import ring_diagnosis as why
    dead = sorted(r for r, f in exc.failures.items() if f.type == "RankDied")
    r = dead[0]
    lines = exc.failures[r].message.splitlines()
    frames = [ln.strip() for ln in lines[2:] if ln.startswith("  ") and not ln.startswith("    ")]
    case, logs = why.case_logs(events)
    k, length, dtype = case.get(r, (None, None, None))
    text = tr("rank {r} crashed ({why}) in {frame}", r=r, why=lines[0], frame=frames[0]) if frames \
        else tr("rank {r} crashed ({why})", r=r, why=lines[0])
    if k is not None:
        first = next((c for c in (why.schedule(logs[q], q, k, length, partial=True) for q in sorted(logs))
                      if c), "")
        causes = [c for c in (why.size_clash(logs, k, length), first) if c]
        text = tr("world size {k}, length {length}, {dtype}: {crash}", k=k, length=length,
                  dtype=dtype, crash=tr_join([text] + causes, "; "))
    return tr("{crash}. gloo aborts when a send and the recv it meets differ in size: each "
              "receive must be exactly as long as the chunk its neighbour sends", crash=text)
