"""Run any valid schedule on real ranks, the core (layer 3: needs torch and a process group).

Rank r holds chunks c = 0..v-1, i.e. virtual stages c*p + r cut from one model. Activations go
forward and gradients backward with point-to-point calls: each send is posted with `isend` and
waited for at the end of the step, each receive is an `irecv` posted `prefetch` actions ahead
and waited for when its action needs the tensor. A blocking `send` would wait for the peer's
receive, and on gloo two ranks that both send first (1F1B's steady state) would wait for ever.

A zero-bubble I computes the input gradient and keeps each layer's output gradient; its W
computes the weight gradients from those alone (`labkit.pipeline.backward`), so I + W does the
work of one fused B. `watch` sees each action from outside (executor.py's measures its time,
its saved activations and pads it); `Quiet` sees nothing.
"""
import contextlib

import torch
import torch.distributed as dist

from labkit.pipeline.backward import backward_input, backward_weight
from labkit.pipeline.toy_mlp import microbatch_loss

_KINDS = {"F": 0, "B": 1}        # message tags: (kind, micro-batch, producing virtual stage)


def _tag(kind: str, mb: int, vs: int, m: int, nv: int) -> int:
    return (_KINDS[kind] * m + mb) * nv + vs


class Quiet:
    """What run_actions tells its watcher: nothing is measured here."""

    def action(self, a, key, layers):            # around an action's compute
        return contextlib.nullcontext()

    def forward(self, key):                      # around the stage's forward alone
        return contextlib.nullcontext()

    def receive(self, kind, mb, src_vs):         # around waiting for a received tensor
        return contextlib.nullcontext()

    def freed(self, key) -> None:                # the backward of `key` is done
        pass


def run_actions(s, rank, parts, xs, ys, prefetch: int = 2, watch=Quiet()) -> float:
    """One training step of schedule s on this rank (gradients accumulate in `parts`). Returns
    the summed loss of the micro-batches (last stage; 0 elsewhere)."""
    m, nv = s.microbatches, s.virtual_stages
    last = nv - 1
    shape = xs[0].shape
    box, inp, out, grad, kept, pending = {}, {}, {}, {}, {}, []
    loss_sum = 0.0
    # the remote inputs of this rank's actions, in order; receives are posted `prefetch` actions
    # ahead, so a transfer overlaps the compute before it (torch's schedules do the same)
    needs = []
    for a in s.actions[rank]:
        vs = s.vstage(rank, a.chunk)
        src_vs = vs - 1 if a.kind == "F" and vs > 0 else vs + 1 if a.kind in "BI" and vs < last else None
        needs.append(None if src_vs is None or s.place(src_vs)[0] == rank else
                     ("F" if a.kind == "F" else "B", a.mb, src_vs))
    posted, next_post = {}, [0]

    def post(upto):
        for need in needs[next_post[0]:upto]:
            if need is not None:
                buf = xs[0].new_empty(shape)          # on the device of the inputs
                posted[need] = (dist.irecv(buf, s.place(need[2])[0], tag=_tag(*need, m, nv)), buf)
        next_post[0] = max(next_post[0], upto)

    def get(kind, mb, src_vs):
        """The tensor virtual stage src_vs made for us: local, or received from its rank."""
        if s.place(src_vs)[0] == rank:
            return box.pop((kind, mb, src_vs))
        work, buf = posted.pop((kind, mb, src_vs))
        with watch.receive(kind, mb, src_vs):
            work.wait()
        return buf

    def put(kind, mb, vs, dst_vs, tensor):
        dst = s.place(dst_vs)[0]
        if dst == rank:
            box[(kind, mb, vs)] = tensor
        else:
            pending.append((dist.isend(tensor.contiguous(), dst, tag=_tag(kind, mb, vs, m, nv)), tensor))

    for k, a in enumerate(s.actions[rank]):
        post(k + 1 + prefetch)
        mb, vs, key, part = a.mb, s.vstage(rank, a.chunk), (a.mb, a.chunk), parts[a.chunk]
        if a.kind == "F":
            x = xs[mb] if vs == 0 else get("F", mb, vs - 1).requires_grad_(True)
            with watch.action(a, key, len(part)):
                with watch.forward(key):
                    y = part(x)
                if vs == last:
                    y = microbatch_loss(y, ys[mb], m)
                    loss_sum += float(y.detach())
                inp[key], out[key] = x, y
            if vs < last:
                put("F", mb, vs, vs + 1, y.detach())
            continue
        if a.kind in ("B", "I"):
            grad[key] = None if vs == last else get("B", mb, vs + 1)
        with watch.action(a, key, len(part)):
            y, g, x = out[key], grad[key], inp[key]
            weights = [q for q in part.parameters() if q.requires_grad]
            if a.kind == "B":
                torch.autograd.backward(y, g, inputs=weights + ([x] if vs > 0 else []))
            elif a.kind == "I" and vs > 0:           # x.grad, and each layer's gradient for W
                kept[key] = backward_input(y, g, x, weights)
            elif a.kind == "W" and key in kept:      # weight gradients only, from what I kept
                backward_weight(kept.pop(key))
            elif a.kind == "W":                      # the first stage: I had nothing to do
                torch.autograd.backward(y, g, inputs=weights)
        if a.kind in ("B", "I") and vs > 0:
            put("B", mb, vs, vs - 1, x.grad)
        if a.kind in ("B", "W"):
            watch.freed(key)
            for d in (inp, out, grad):
                d.pop(key, None)
    for work, _ in pending:
        work.wait()
    return loss_sum
