"""Watching the learner's ring from inside a rank (used by `labkit.check.comm`).

While the learner's function runs, `watch` replaces `dist.send/recv/isend/irecv` with versions
that log each message (kind, peer, where in the tensor, size, dtype) and emit it (so a hang can
be explained from the notebook), and `dist.get_world_size/get_rank` (and labkit's) with ones
that notice a call without the group. Three mistakes are stopped before they reach gloo, where
they would hang or kill a rank:

- a message to or from a rank that is not the ring neighbour (RingMistake, raised before it is
  posted, so nothing is left half-sent when every rank makes the same mistake), and the
  neighbour's group rank passed where torch reads a global one (dst=/src= even with group=,
  or no group= at all), which only shows on a group that does not start at global rank 0;
- the world's size or rank asked for inside a group (RingMistake, at the call);
- a buffer of another dtype than the tensor: the message travels in the tensor's dtype (so the
  sizes still match and the ring goes on) and the mistake is noted for the verdict.
"""
import contextlib
import sys

import torch
import torch.distributed as dist

from labkit.i18n import tr

P2P = ("send", "recv", "isend", "irecv")
# The gloo requests of the learner's isend/irecv calls dropped without a wait, kept alive until
# the checker's drain (comm._drain) has met them. Gloo gives up a send whose request is
# destroyed before its message has left: on fresh ranks a wrong answer's dropped isend never
# arrived, the drain waited 3 s for it, and the checker replaced the ranks.
UNWAITED = []


class RingMistake(Exception):
    """A mistake the watch recognised on the spot; its message is the diagnosis."""


def start_of(t, flat):
    """Element offset of `t` inside `flat`, or None if `t` is a separate buffer."""
    if t.numel() == 0 or flat.numel() == 0:
        return None
    if t.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr() or t.dtype != flat.dtype:
        return None
    off = (t.data_ptr() - flat.data_ptr()) // flat.element_size()
    return off if 0 <= off < flat.numel() else None


class _Converted:
    """A receive made in the tensor's dtype, copied into the learner's buffer when it is done."""

    def __init__(self, work, tmp, dst):
        self.work, self.tmp, self.dst, self.done = work, tmp, dst, False

    def wait(self, *args, **kwargs):
        out = self.work.wait(*args, **kwargs)
        if not self.done:
            self.dst.copy_(self.tmp)
            self.done = True
        return out

    def is_completed(self):
        return self.work.is_completed()


class _Request:
    """The learner's isend/irecv request: notes (and emits, for a hang) a request dropped
    before anyone waited on it."""

    def __init__(self, work, what, notes, emit):
        self.work, self.what, self.notes, self.emit, self.waited = work, what, notes, emit, False

    def wait(self, *args, **kwargs):
        self.waited = True
        return self.work.wait(*args, **kwargs)

    def is_completed(self):
        return self.work.is_completed()

    def __getattr__(self, name):
        return getattr(self.work, name)

    def __del__(self):
        if not self.waited:
            UNWAITED.append(self.work)
            rank, kind, number, peer = self.what
            way = (tr("{kind} number {number} (to rank {peer})", kind=kind, number=number,
                      peer=peer) if kind == "isend" else
                   tr("{kind} number {number} (from rank {peer})", kind=kind, number=number,
                      peer=peer))
            text = tr("rank {rank} never waited on its {which}: keep every request and call "
                      ".wait() on it; a message whose request is dropped unwaited is not sure to "
                      "arrive (nor its buffer safe to reuse)", rank=rank, which=way)
            self.notes.append(text)
            try:
                self.emit(dropped=text)
            except Exception:           # noqa: BLE001 - never raise from __del__
                pass


def _from_learner() -> bool:
    """True when the caller two frames up is not labkit's or torch's own code."""
    name = sys._getframe(2).f_code.co_filename.replace("\\", "/")
    return "/labkit/" not in name and "/torch/" not in name


def _group_rank(group, peer):
    """The group rank of global rank `peer` (itself for the whole world), None outside it."""
    if group is None:
        return peer
    try:
        return dist.get_group_rank(group, peer)
    except (ValueError, RuntimeError):
        return None


def _who(gpeer, peer) -> str:
    return tr("rank {r}", r=gpeer) if gpeer is not None else \
        tr("global rank {peer}, which is not in the group", peer=peer)


def _global_peer(kind, me, want, peer, group, no_group) -> str:
    """A group rank passed where torch reads a global one (dst=/src=, or no group= at all)."""
    send = kind.endswith("send")
    arg, garg = ("dst", "group_dst") if send else ("src", "group_src")
    mine, theirs = dist.get_global_rank(group, me), dist.get_global_rank(group, want)
    there = _group_rank(group, peer)
    reads = (tr("global rank {peer} (not in the group)", peer=peer) if there is None
             else tr("global rank {peer} (rank {there} of the group)", peer=peer, there=there))
    f = dict(me=me, mine=mine, want=want, theirs=theirs, kind=kind, arg=arg, peer=peer, reads=reads,
             garg=garg)
    if no_group:
        return (tr("rank {me} of the group (global rank {mine}) sends to rank {want} of the group "
                   "(global rank {theirs}) as {kind}(..., {arg}={peer}) without group=: on the whole "
                   "world that is {reads}. Pass group=group and {garg}={want} (group ranks; or "
                   "{arg}=dist.get_global_rank(group, {want}))", **f) if send else
                tr("rank {me} of the group (global rank {mine}) receives from rank {want} of the "
                   "group (global rank {theirs}) as {kind}(..., {arg}={peer}) without group=: on "
                   "the whole world that is {reads}. Pass group=group and {garg}={want} (group "
                   "ranks; or {arg}=dist.get_global_rank(group, {want}))", **f))
    return (tr("rank {me} of the group (global rank {mine}) sends to rank {want} of the group "
               "(global rank {theirs}) as {kind}(..., {arg}={peer}, group=group): {arg}= is a "
               "global rank even with group=, so that is {reads}; use {garg}={want} (or "
               "{arg}=dist.get_global_rank(group, {want}))", **f) if send else
            tr("rank {me} of the group (global rank {mine}) receives from rank {want} of the group "
               "(global rank {theirs}) as {kind}(..., {arg}={peer}, group=group): {arg}= is a "
               "global rank even with group=, so that is {reads}; use {garg}={want} (or "
               "{arg}=dist.get_global_rank(group, {want}))", **f))


@contextlib.contextmanager
def watch(flat, group, k, world, log, notes, emit):
    """Patch torch.distributed (and labkit.rank/world_size) for the learner's call."""
    import labkit
    orig = {name: getattr(dist, name) for name in P2P + ("get_world_size", "get_rank")}
    orig_lab = {"rank": labkit.rank, "world_size": labkit.world_size}
    me = orig["get_rank"](group)
    ring_group = group
    state = {"live": True, "busy": False}

    def emit_once(**data):
        """emit, but never from inside another emit (a request's __del__ can run during one,
        when the garbage collector frees it) nor after this watch ended (a request freed late,
        from a reference cycle): both would write to the rank's event pipe while it is busy."""
        if state["live"] and not state["busy"]:
            state["busy"] = True
            try:
                emit(**data)
            finally:
                state["busy"] = False
    right, left = (me + 1) % k, (me - 1) % k

    def p2p(kind):
        send = kind.endswith("send")

        def call(tensor, peer=None, group=None, tag=0, **kw):
            peer = kw.pop("dst" if send else "src", peer)
            gpeer = kw.get("group_dst" if send else "group_src")
            want = right if send else left
            if gpeer is None and peer is not None:
                gpeer = _group_rank(group if group is not None else ring_group, peer)
                if gpeer != want and peer == want and ring_group is not None:
                    raise RingMistake(_global_peer(kind, me, want, peer, ring_group, group is None))
            if gpeer is not None and gpeer != want and tensor.numel():
                who = _who(gpeer, peer)
                raise RingMistake(
                    tr("rank {me} sends to {who} ({kind}); the ring sends to the right-hand "
                       "neighbour {right} (group ranks: rank + 1 and rank - 1, mod the group's "
                       "size)", me=me, who=who, kind=kind, right=right) if send else
                    tr("rank {me} receives from {who} ({kind}); the ring receives from the "
                       "left-hand neighbour {left} (group ranks: rank + 1 and rank - 1, mod the "
                       "group's size)", me=me, who=who, kind=kind, left=left))
            real, convert = tensor, None
            if tensor.dtype != flat.dtype and tensor.numel():
                fields = dict(me=me, dtype=str(tensor.dtype)[6:], want=str(flat.dtype)[6:])
                notes.append(tr("rank {me} sends a {dtype} buffer while the tensor is {want}: make "
                                "buffers with torch.empty_like(chunk), the same dtype as the tensor "
                                "(gloo and NCCL match messages by bytes)", **fields) if send else
                             tr("rank {me} receives into a {dtype} buffer while the tensor is {want}: "
                                "make buffers with torch.empty_like(chunk), the same dtype as the "
                                "tensor (gloo and NCCL match messages by bytes)", **fields))
                if send:
                    real = tensor.to(flat.dtype)
                else:
                    real = convert = torch.empty(tensor.shape, dtype=flat.dtype, device=tensor.device)
            if tensor.numel():
                entry = (kind, gpeer, start_of(tensor, flat), tensor.numel(), group is not None)
                log.append(entry)
                emit_once(p2p=list(entry), n=len(log))
            work = orig[kind](real, peer, group, tag, **kw)
            if convert is not None:
                if kind == "recv":
                    tensor.copy_(convert)
                else:
                    work = _Converted(work, convert, tensor)
            if kind.startswith("i") and tensor.numel():
                work = _Request(work, (me, kind, len(log), gpeer), notes, emit_once)
            return work
        return call

    def asked(what, fn_orig, lab=False):
        def call(group_arg=None, *a, **kw):
            group_arg = kw.pop("group", group_arg)
            if group is not None and group_arg is None and (lab or _from_learner()):
                if lab and not _from_learner():
                    return fn_orig(*a, **kw)
                raise RingMistake(tr(
                    "your function asked for the {what} without the group: inside a group of {k} "
                    "of the {world} ranks that is the world's, not the group's; use "
                    "dist.get_world_size(group) and dist.get_rank(group)", what=what, k=k,
                    world=world))
            return fn_orig(group_arg, *a, **kw) if not lab else fn_orig()
        return call

    patched = {name: p2p(name) for name in P2P}
    patched["get_world_size"] = asked(tr("world size (dist.get_world_size())"), orig["get_world_size"])
    patched["get_rank"] = asked(tr("rank (dist.get_rank())"), orig["get_rank"])
    try:
        for name, f in patched.items():
            setattr(dist, name, f)
        labkit.world_size = asked(tr("world size (labkit.world_size())"), orig_lab["world_size"], lab=True)
        labkit.rank = asked(tr("rank (labkit.rank())"), orig_lab["rank"], lab=True)
        yield
    finally:
        for name, f in orig.items():
            setattr(dist, name, f)
        labkit.world_size, labkit.rank = orig_lab["world_size"], orig_lab["rank"]
        state["live"] = False
