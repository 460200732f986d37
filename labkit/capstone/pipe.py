"""One training step of a pipeline schedule (`labkit.pipeline`'s schedules as data) over the
grid's PP group: activations forward and gradients backward by point-to-point calls between
the ranks of this (dp, cp, tp) coordinate's pipeline. Sends are `isend`s waited for at the end
of the step (a blocking send on gloo can wait for ever in 1F1B's steady state); receives block
when their action needs the tensor.

Each micro-batch's loss is divided by the number of micro-batches m, so the gradients summed
over the micro-batches are the gradient of the batch's mean (GPipe, arXiv 1811.06965; the
mistake `divide=False` makes them m times too large).
"""
import torch
import torch.distributed as dist

from labkit.pipeline import compute_only, gpipe, one_f_one_b

_SCHEDULES = {"1f1b": one_f_one_b, "gpipe": gpipe}


def step(stage_mod, grid, xs, ys, loss_fn, shape, schedule="1f1b", divide=True) -> float:
    """Run F and B of every micro-batch on this stage; returns the sum over micro-batches of
    the mean loss of each (last stage; 0 elsewhere). xs: the micro-batches' inputs (first
    stage), ys: their targets (last stage), shape: an activation's shape between stages."""
    p, m = grid.pp, len(xs)
    s = compute_only(_SCHEDULES[schedule](p, m))
    me, last = grid.stage, grid.pp - 1
    inp, out, pending, total = {}, {}, [], 0.0
    for a in s.actions[me]:
        mb = a.mb
        if a.kind == "F":
            if me == 0:
                x = xs[mb]
            else:
                x = torch.empty(shape)
                dist.recv(x, src=grid.peer(me - 1), tag=mb)
                x.requires_grad_(True)
            y = stage_mod(x)
            if me == last:
                loss = loss_fn(y, ys[mb])
                total += float(loss.detach())
                y = loss / m if divide else loss
            else:
                pending.append(dist.isend(y.detach().contiguous(), dst=grid.peer(me + 1), tag=mb))
            inp[mb], out[mb] = x, y
        elif a.kind == "B":
            y, x = out.pop(mb), inp.pop(mb)
            if me == last:
                y.backward()
            else:
                g = torch.empty(shape)
                dist.recv(g, src=grid.peer(me + 1), tag=m + mb)
                y.backward(g)
            if me > 0:
                pending.append(dist.isend(x.grad.contiguous(), dst=grid.peer(me - 1), tag=m + mb))
        else:
            raise ValueError(f"the capstone's pipeline runs F and B actions, not {a.kind}")
    for w in pending:
        w.wait()
    return total
