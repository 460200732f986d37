"""Answers to notebook 02's exercise: fn(tensor, group=None) sums `tensor` over the group's
ranks in place, with a ring of point-to-point messages."""
import torch
import torch.distributed as dist

import labkit
from labkit import comm
from labkit.comm import chunk_bounds


def ring(tensor, group=None, *, cut="bounds", buffer="like", sizes="group", left_of=None,
         right_of=None, shift=0, rs_steps=None, gather="copy", scatter="add", out_of_place=False,
         rs_shift=0, ag_shift=0, mean=False, wait_sends=True, peers="group"):
    """The notebook's solution, with one knob per mistake a learner makes."""
    if sizes == "group":
        rank, n = dist.get_rank(group), dist.get_world_size(group)
    else:                                                       # the world's, not the group's
        rank, n = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    if out_of_place:
        flat = flat.clone()
    if cut == "bounds":
        chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    elif cut == "floor":                                        # numel // n: remainder dropped
        q = flat.numel() // n
        chunks = [flat[i * q:(i + 1) * q] for i in range(n)]
    else:                                                       # tensor.chunk(n)
        chunks = list(flat.chunk(n))
    right = (rank + 1) % n if right_of is None else right_of(rank, n)
    left = (rank - 1) % n if left_of is None else left_of(rank, n)

    def exchange(send, recv):
        reqs = []
        if send.numel():
            if peers == "group":
                q = dist.isend(send, group=group, group_dst=right)
            elif peers == "dst":                                # dst= is a global rank
                q = dist.isend(send, dst=right, group=group)
            else:                                               # no group=: on the whole world
                q = dist.isend(send, dst=right)
            if wait_sends:                                      # else: fire and forget
                reqs.append(q)
            del q
        if recv.numel():
            if peers == "group":
                reqs.append(dist.irecv(recv, group=group, group_src=left))
            elif peers == "dst":
                reqs.append(dist.irecv(recv, src=left, group=group))
            else:
                reqs.append(dist.irecv(recv, src=left))
        for q in reqs:
            q.wait()

    for s in range(n - 1 if rs_steps is None else rs_steps(n)):            # reduce-scatter
        send = chunks[(rank - s - 1 + shift + rs_shift) % n]
        recv = chunks[(rank - s - 2 + rs_shift) % n]
        incoming = torch.empty_like(recv) if buffer == "like" else torch.empty(recv.numel())
        exchange(send, incoming)
        if scatter == "add":
            recv += incoming.to(recv.dtype)
        elif scatter == "rebind":                               # a new tensor, the chunk unchanged
            recv = recv + incoming
        else:
            recv.copy_(incoming)
    for s in range(n - 1):                                                  # all-gather
        send, recv = chunks[(rank - s + ag_shift) % n], chunks[(rank - s - 1 + ag_shift) % n]
        if gather == "copy":
            exchange(send, recv)
        else:
            incoming = torch.empty_like(recv)
            exchange(send, incoming)
            recv += incoming
    if mean:
        flat /= n
    return flat if out_of_place else tensor


def right_notebook(tensor, group=None):
    return ring(tensor, group)


def right_textbook(tensor, group=None):
    """The other common convention: rank r ends the reduce-scatter owning chunk r + 1."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    chunks = [tensor.view(-1)[a:b] for a, b in chunk_bounds(tensor.numel(), n)]
    for s in range(2 * (n - 1)):
        send = chunks[(rank - s) % n] if s < n - 1 else chunks[(rank - s + n) % n]
        recv = chunks[(rank - s - 1) % n] if s < n - 1 else chunks[(rank - s + n - 1) % n]
        buf = torch.empty_like(recv)
        reqs = [dist.isend(send, group=group, group_dst=(rank + 1) % n)] if send.numel() else []
        reqs += [dist.irecv(buf, group=group, group_src=(rank - 1) % n)] if recv.numel() else []
        for q in reqs:
            q.wait()
        if s < n - 1:
            recv += buf
        else:
            recv.copy_(buf)
    return tensor


def right_blocking(tensor, group=None):
    """Blocking send/recv, even ranks sending first, odd ones receiving first."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    chunks = [tensor.view(-1)[a:b] for a, b in chunk_bounds(tensor.numel(), n)]
    right = dist.get_global_rank(group, (rank + 1) % n) if group is not None else (rank + 1) % n
    left = dist.get_global_rank(group, (rank - 1) % n) if group is not None else (rank - 1) % n
    for s in range(2 * (n - 1)):
        rs = s < n - 1
        send = chunks[(rank - s - 1) % n] if rs else chunks[(rank - s + n - 1) % n]
        recv = chunks[(rank - s - 2) % n] if rs else chunks[(rank - s + n - 2) % n]
        buf = torch.empty_like(recv)
        ops = [lambda: send.numel() and dist.send(send, right, group=group),
               lambda: recv.numel() and dist.recv(buf, left, group=group)]
        for op in (ops if rank % 2 == 0 else ops[::-1]):
            op()
        if rs:
            recv += buf
        else:
            recv.copy_(buf)
    return tensor


def blocking_group_ranks(tensor, group=None):
    """right_blocking with the group ranks passed positionally (dist.send's dst is global)."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    chunks = [tensor.view(-1)[a:b] for a, b in chunk_bounds(tensor.numel(), n)]
    for s in range(2 * (n - 1)):
        rs = s < n - 1
        send = chunks[(rank - s - 1) % n] if rs else chunks[(rank - s + n - 1) % n]
        recv = chunks[(rank - s - 2) % n] if rs else chunks[(rank - s + n - 2) % n]
        buf = torch.empty_like(recv)
        ops = [lambda: send.numel() and dist.send(send, (rank + 1) % n, group=group),
               lambda: recv.numel() and dist.recv(buf, (rank - 1) % n, group=group)]
        for op in (ops if rank % 2 == 0 else ops[::-1]):
            op()
        if rs:
            recv += buf
        else:
            recv.copy_(buf)
    return tensor


def stub(tensor, group=None):
    raise NotImplementedError("exercise: replace this line with your code")


def deadlock(tensor, group=None):              # everyone receives before anyone sends
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    dist.recv(tensor, group=group, group_src=(rank - 1) % n)
    dist.send(tensor, group=group, group_dst=(rank + 1) % n)
    return tensor


RIGHT = [("notebook's solution", right_notebook), ("textbook convention", right_textbook),
         ("blocking send/recv, even-odd", right_blocking), ("labkit's pipelined ring", comm.ring_all_reduce),
         ("labkit's simple ring", comm.ring_all_reduce_simple)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("returns a new tensor", lambda t, group=None: ring(t, group, out_of_place=True),
     "left `tensor` unchanged and returned a new tensor: the exercise asks for an in-place", "clean"),
    ("numel // n chunks", lambda t, group=None: ring(t, group, cut="floor"),
     "chunks cut with numel // n", "clean"),
    ("float32 receive buffer", lambda t, group=None: ring(t, group, buffer="float32"),
     "receives into a float32 buffer while the tensor is int64", "clean"),
    ("world size instead of the group's", lambda t, group=None: ring(t, group, sizes="world"),
     "without the group", "clean"),
    ("receives from the right (isend/irecv)",
     lambda t, group=None: ring(t, group, left_of=lambda r, n: (r + 1) % n),
     "receives from the left-hand neighbour", "clean"),
    ("sends to the left", lambda t, group=None: ring(t, group, right_of=lambda r, n: (r - 1) % n,
                                                     left_of=lambda r, n: (r + 1) % n),
     "the ring sends to the right-hand neighbour", "clean"),
    ("tensor.chunk(n)", lambda t, group=None: ring(t, group, cut="chunk"),
     "tensor.chunk(2) makes only 1 chunk of a length-1 tensor", "clean"),
    ("one reduce-scatter step too few", lambda t, group=None: ring(t, group, rs_steps=lambda n: n - 2),
     "a step is missing", "clean"),
    ("wrong chunk sent", lambda t, group=None: ring(t, group, shift=1),
     "whose matching recv", "crash"),          # sizes differ: gloo aborts the receiving rank
    ("copies in reduce-scatter", lambda t, group=None: ring(t, group, scatter="copy"),
     "what arrived was never added into it. In the reduce-scatter add in place", "clean"),
    ("adds in all-gather", lambda t, group=None: ring(t, group, gather="add"),
     "check the arithmetic", "clean"),
    ("deadlock", deadlock, "post them with isend/irecv", "hang"),
    # found walking through the learner copy of notebook 02
    ("recv = recv + incoming", lambda t, group=None: ring(t, group, scatter="rebind"),
     "still holds this rank's own input: what arrived was never added into it", "clean"),
    ("one reduce-scatter step too many", lambda t, group=None: ring(t, group, rs_steps=lambda n: n),
     "the sum is right, but rank 0 sent 11 elements in 3 messages where the ring sends 7", "clean"),
    ("all-gather with the reduce-scatter's indices", lambda t, group=None: ring(t, group, ag_shift=-1),
     "after your reduce-scatter rank 0 holds the whole sum of chunk 0, so the all-gather sends "
     "that chunk first", "clean"),
    ("reduce-scatter one chunk later than the all-gather",
     lambda t, group=None: ring(t, group, rs_shift=1),
     "after your reduce-scatter rank 0 holds the whole sum of chunk 1", "clean"),
    ("the mean, not the sum", lambda t, group=None: ring(t, group, mean=True),
     "every value is the sum divided by 2, the mean", "clean"),
    ("calls dist.all_reduce", lambda t, group=None: dist.all_reduce(t, group=group) and t,
     "sent no point-to-point message: the exercise is to build the all-reduce", "clean"),
    ("isend never waited", lambda t, group=None: ring(t, group, wait_sends=False),
     "never waited on its isend", "hang"),     # the message may never arrive: a hang, or a FAIL
    # group ranks where torch wants global ones: passed while every sub-group was ranks 0..k-1
    ("dst= with the group's rank", lambda t, group=None: ring(t, group, peers="dst"),
     "dst= is a global rank", "clean"),
    ("blocking send with the group's rank", lambda t, group=None: blocking_group_ranks(t, group),
     "dst= is a global rank", "clean"),
    ("group ranks without group=", lambda t, group=None: ring(t, group, peers="world"),
     "without group=", "clean"),
]
