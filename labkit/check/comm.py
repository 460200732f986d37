"""Checker for notebook 02: the learner's ring all-reduce.

    labkit.check.ring_all_reduce(my_ring)    # my_ring(tensor, group=None): sum in place

It runs `fn` on sub-groups of 2, 3 and 4 ranks (as many as the cluster has) with awkward
lengths (shorter than the world size, not divisible by it) and dtypes, compares with
`dist.all_reduce`, and logs every point-to-point call the learner makes (peer, and which
chunk of the tensor it sends), so a wrong answer is reported as the first rank, step and
chunk that differ from the ring's schedule, and a hang as where each rank was waiting.
"""
import torch

from labkit.check.core import checker

__all__ = ["ring_all_reduce"]

_LENGTHS = [7, 3, 1, 1001]      # 7 first: every chunk non-empty, so a diagnosis names real steps
_DTYPES = ["float32", "int64", "bfloat16", "float64"]
_TIMEOUT = 6.0          # seconds: a correct ring finishes every case in well under one
_groups = {}            # world size -> process group, kept on each rank between checks


def _chunk_of(t, flat):
    """Which chunk of `flat` the tensor `t` starts in, or None if it is a separate buffer."""
    from labkit.comm.formulas import chunk_bounds
    if t.numel() == 0 or flat.numel() == 0:
        return None
    off = (t.data_ptr() - flat.data_ptr()) // max(flat.element_size(), 1)
    if not 0 <= off < flat.numel() or t.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr():
        return None
    return next(i for i, (a, b) in enumerate(chunk_bounds(flat.numel(), _n[0])) if a <= off < b)


_n = [1]


def _logged(flat, group, log, emit):
    """Replacements for dist.send/recv/isend/irecv that log (kind, peer group rank, chunk)."""
    import torch.distributed as dist
    orig = {k: getattr(dist, k) for k in ("send", "recv", "isend", "irecv")}

    def wrap(kind):
        def call(tensor, peer=None, group=None, tag=0, **kw):
            gpeer = kw.get("group_dst", kw.get("group_src"))
            if gpeer is None and peer is not None:
                gpeer = peer if group is None else dist.get_group_rank(group, peer)
            entry = (kind.lstrip("i"), gpeer, _chunk_of(tensor, flat), tensor.numel())
            if tensor.numel():
                log.append(entry)
                emit(p2p=list(entry), n=len(log))
            return orig[kind](tensor, peer, group, tag, **kw)
        return call
    return orig, {k: wrap(k) for k in orig}


def _schedule(r, n, convention):
    """The chunks rank r sends, step by step: labkit's ring (rank r ends owning chunk r)
    or the textbook one (rank r ends owning chunk r+1)."""
    shift = 1 if convention == 0 else 0
    return [(r - s - shift) % n for s in range(n - 1)] + [(r - s + 1 - shift) % n for s in range(n - 1)]


def _diagnose_schedule(log, r, n, sizes, partial=False):
    """First step where rank r's sends leave the ring schedule, as a sentence, or ''.
    partial: the rank stopped early (crashed), so missing sends are not a finding."""
    sends = [e for e in log if e[0] == "send"]
    right = (r + 1) % n
    wants = [[c for c in _schedule(r, n, conv) if sizes[c]] for conv in (0, 1)]
    first = sends[0][2] if sends else None
    want = next((w for w in wants if w and w[0] == first), wants[1])   # the learner's convention
    for s, expected in enumerate(want):
        phase = "reduce-scatter" if s < n - 1 else "all-gather"
        where = f"rank {r}, send {s + 1} ({phase})"
        if s >= len(sends):
            if partial:
                return ""
            return (f"rank {r} made {len(sends)} non-empty sends, the ring needs {len(want)} here "
                    f"({n - 1} reduce-scatter + {n - 1} all-gather steps): a step is missing")
        _, peer, chunk, _ = sends[s]
        if peer != right:
            return f"{where}: sent to rank {peer}, the ring sends to the right-hand neighbour {right}"
        if chunk is not None and chunk != expected:
            return f"{where}: sent chunk {chunk}, the ring sends chunk {expected} at this step"
    if len(sends) > len(want):
        return f"rank {r}: {len(sends)} sends, the ring needs {len(want)}"
    return ""


def _case(fn, rank, k, length, dtype, group):
    """Run fn once on this rank (in the sub-group of k ranks); a problem dict or None."""
    import torch.distributed as dist
    import labkit
    from labkit.comm.formulas import chunk_bounds
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(7919 * length + 31 * k + rank)
    x = torch.randint(-20, 20, (length,), generator=g).to(dt) if not dt.is_floating_point \
        else torch.randn(length, generator=g, dtype=torch.float32).to(dt)
    expected = x.clone()
    dist.all_reduce(expected, group=group)
    t, log = x.clone(), []
    _n[0] = k
    labkit.emit(case=[k, length, dtype])
    orig, patched = _logged(t, group, log, labkit.emit)
    try:
        for name, f in patched.items():
            setattr(dist, name, f)
        out = fn(t, group=group)
    except Exception as exc:          # noqa: BLE001 - raised again once every rank knows
        return {"raise": exc}
    finally:
        for name, f in orig.items():
            setattr(dist, name, f)
    got = out if isinstance(out, torch.Tensor) else t
    case = f"world size {k}, length {length}, {dtype}"
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return {"case": case, "rank": rank, "text": f"returned shape {tuple(got.shape)} "
                f"{got.dtype}, expected {tuple(expected.shape)} {expected.dtype}"}
    tol = 0 if not dt.is_floating_point else 4 * k * torch.finfo(dt).eps
    bad = ((got.double() - expected.double()).abs() > tol * (1 + expected.double().abs())).nonzero()
    if not len(bad):
        return None
    i = bad[0].item()
    bounds = chunk_bounds(length, k)
    chunk = next(c for c, (a, b) in enumerate(bounds) if a <= i < b)
    text = f"rank {rank}, chunk {chunk} (element {i}) is {got[i].item():.6g}, expected {expected[i].item():.6g}"
    why = _diagnose_schedule(log, rank, k, [b - a for a, b in bounds])
    text += f"; {why}" if why else ("; the sends follow the ring schedule, so check the "
                                    "arithmetic: add in reduce-scatter, copy in all-gather")
    return {"case": case, "rank": rank, "text": text}


def _drive(fn):
    """On every rank: every case in the same order; all ranks stop at the first case where
    any rank saw a problem (so none is left waiting). Returns this rank's problem or None."""
    import torch.distributed as dist
    import labkit
    rank, world = labkit.rank(), labkit.world_size()
    for k in range(2, min(4, world) + 1):
        if k not in _groups:
            _groups[k] = None if k == world else dist.new_group(list(range(k)))
    for k in range(2, min(4, world) + 1):
        for length in _LENGTHS:
            for dtype in _DTYPES:
                problem = _case(fn, rank, k, length, dtype, _groups[k]) if rank < k else None
                flag = torch.tensor([1 if problem else 0])
                dist.all_reduce(flag)
                if flag.item():
                    if problem and "raise" in problem:
                        raise problem["raise"]      # a stub: "not implemented yet"
                    return problem
    return None


def _describe_hang(exc, events):
    """Which case was running and, per rank, the last message it posted and where it waits."""
    case, last = None, {}
    for e in events:
        if "case" in e.data:
            case = e.data["case"]
        if "p2p" in e.data:
            last[e.rank] = (e.data["p2p"], e.data["n"])
    parts = []
    for r, where in sorted(exc.stuck.items()):
        frames = [ln.strip() for ln in where.splitlines()[1:] if ln.startswith("  ") and not ln.startswith("    ")]
        mine = [f for f in frames if not f.startswith("torch/") and "labkit/check" not in f]
        at = mine or frames
        if case and r >= case[0]:
            parts.append(f"rank {r} is outside this group and waits for it")
            continue
        posted = last.get(r)
        msg = (f"its message {posted[1]} was a {posted[0][0]} with rank {posted[0][1]}"
               if posted else "no message posted")
        parts.append(f"rank {r} waits {where.splitlines()[0]}" + (f" at {at[0]}" if at else "")
                     + f" ({msg})")
    head = f"hung (world size {case[0]}, length {case[1]}, {case[2]})" if case else "hung"
    return head + ": " + "; ".join(parts) + \
        ". Every send needs a matching recv: post them with isend/irecv before waiting."


def _case_logs(events):
    """The last case each rank started and the p2p calls it made in it, from emitted events."""
    case, logs = {}, {}
    for e in events:
        if "case" in e.data:
            case[e.rank], logs[e.rank] = e.data["case"], []
        elif "p2p" in e.data:
            logs.setdefault(e.rank, []).append(tuple(e.data["p2p"]))
    return case, logs


def _size_clash(logs, k):
    """The first message whose size differs from the recv it met (i-th send from a to b
    meets the i-th recv posted by b from a), as a sentence, or ''."""
    def what(chunk, numel):
        return f"chunk {chunk} ({numel} elements)" if chunk is not None else f"a buffer of {numel} elements"
    for dst in range(k):
        for src in range(k):
            sends = [e for e in logs.get(src, []) if e[0] == "send" and e[1] == dst]
            recvs = [e for e in logs.get(dst, []) if e[0] == "recv" and e[1] == src]
            for i, (a, b) in enumerate(zip(sends, recvs)):
                if a[3] != b[3]:
                    return (f"rank {src} sent {what(a[2], a[3])} to rank {dst}, whose matching recv "
                            f"(its message {i + 1} from rank {src}) was into {what(b[2], b[3])}")
    return ""


def _describe_crash(exc, events):
    """A rank's process died inside the learner's ring (gloo aborts when a message and the
    receive it matched differ in size): say which, where, and what its schedule got wrong."""
    from labkit.comm.formulas import chunk_bounds
    dead = sorted(r for r, f in exc.failures.items() if f.type == "RankDied")
    r = dead[0]
    lines = exc.failures[r].message.splitlines()
    frames = [ln.strip() for ln in lines[2:] if ln.startswith("  ") and not ln.startswith("    ")]
    case, logs = _case_logs(events)
    k, length, dtype = case.get(r, (None, None, None))
    text = f"rank {r} crashed ({lines[0]})" + (f" in {frames[0]}" if frames else "")
    if k is not None:
        text = f"world size {k}, length {length}, {dtype}: {text}"
        clash = _size_clash(logs, k)
        if clash:
            text += f"; {clash}"
        sizes = [b - a for a, b in chunk_bounds(length, k)]
        for q in sorted(logs):
            why = _diagnose_schedule(logs[q], q, k, sizes, partial=True)
            if why:
                text += f"; {why}"
                break
    return text + (". gloo aborts when a send and the recv it meets differ in size: check "
                   "which neighbour each rank sends to and receives from")


@checker("ring_all_reduce")
def ring_all_reduce(fn, cluster, timeout: float = _TIMEOUT):
    """fn(tensor, group=None) must sum `tensor` over the ranks of `group`, in place."""
    import labkit
    try:
        results = cluster.run(_drive, fn, timeout=timeout)
    except labkit.RankTimeout as exc:
        return False, _describe_hang(exc, cluster.events)
    except labkit.RankError as exc:
        if any(f.type == "RankDied" for f in exc.failures.values()):
            return False, _describe_crash(exc, cluster.events)
        raise
    problems = [p for p in results if p]
    if problems:
        p = min(problems, key=lambda p: p["rank"])
        return False, f"{p['case']}: {p['text']}"
    sizes = ", ".join(str(k) for k in range(2, min(4, cluster.world_size) + 1))
    return True, (f"world sizes {sizes}; lengths {', '.join(map(str, _LENGTHS))}; "
                  f"{', '.join(_DTYPES)}")
