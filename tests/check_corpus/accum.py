"""Answers to notebook 09's exercise: fn(model, x, y, micro) cuts this rank's batch into `micro`
micro-batches, accumulates their gradients and averages them over the ranks once."""
import torch
import torch.distributed as dist

from labkit.models import lm_loss


def _average(model):
    n = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= n


def right_chunk(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)


def right_index(model, x, y, micro):
    size = x.size(0) // micro
    for i in range(micro):
        s = slice(i * size, (i + 1) * size)
        loss = lm_loss(model(x[s]), y[s])
        (loss / micro).backward()
    for p in model.parameters():
        if p.requires_grad:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


def right_flat(model, x, y, micro):
    """One all-reduce of every gradient flattened together."""
    for xs, ys in zip(x.split(x.size(0) // micro), y.split(y.size(0) // micro)):
        lm_loss(model(xs), ys).div(micro).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    i = 0
    for g in grads:
        g.copy_(flat[i:i + g.numel()].view_as(g))
        i += g.numel()


def stub(model, x, y, micro):
    raise NotImplementedError("exercise: replace this line with your code")


def not_divided(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        lm_loss(model(xs), ys).backward()
    _average(model)


def divided_twice(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro / micro).backward()
    _average(model)


def zero_grad_inside(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        model.zero_grad()
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)


def first_only(model, x, y, micro):
    xs, ys = x.chunk(micro)[0], y.chunk(micro)[0]
    (lm_loss(model(xs), ys) / micro).backward()
    _average(model)


def no_all_reduce(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()


def sum_over_ranks(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


def every_micro(model, x, y, micro):
    """Right values, micro times the traffic: averages after every micro-batch."""
    n = dist.get_world_size()
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        before = {p: (p.grad.clone() if p.grad is not None else None) for p in model.parameters()}
        (lm_loss(model(xs), ys) / micro).backward()
        for p in model.parameters():
            if p.grad is not None:
                new = p.grad - (before[p] if before[p] is not None else 0)
                dist.all_reduce(new)
                p.grad.copy_((before[p] if before[p] is not None else 0) + new / n)


def none_grad(model, x, y, micro):                   # the frozen parameter has no gradient
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def averaged_twice(model, x, y, micro):
    """ReduceOp.AVG, then divided by the world size again: 1/N of the mean."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            p.grad /= dist.get_world_size()


def losses_summed(model, x, y, micro):
    """The micro-batches' losses summed into one backward, not divided: micro x the gradient."""
    total = sum(lm_loss(model(xs), ys) for xs, ys in zip(x.chunk(micro), y.chunk(micro)))
    total.backward()
    _average(model)


def steps_inside(model, x, y, micro):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)
    opt.step()


def frozen_given_grad(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    _average(model)


RIGHT = [("chunk", right_chunk), ("index and AVG", right_index), ("flat", right_flat)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("loss not divided", not_divided, "divide each micro-batch's loss by the number of micro-batches", "clean"),
    ("divided twice", divided_twice, "divided by 3 once more", "clean"),
    ("zero_grad inside the loop", zero_grad_inside, "only the last micro-batch's gradient is left", "clean"),
    ("first micro-batch only", first_only, "only the first micro-batch counted", "clean"),
    ("no all-reduce", no_all_reduce, "not averaged over the ranks", "clean"),
    ("sum over ranks", sum_over_ranks, "the sum over ranks", "clean"),
    ("all-reduce every micro-batch", every_micro, "all-reduce once, after the last", "clean"),
    ("None gradient", none_grad, "'frozen' is frozen (requires_grad=False), so its .grad is None", "clean"),
    ("averaged twice (1/N)", averaged_twice, "your gradients are 1/", "clean"),
    ("losses summed, not divided (micro x)", losses_summed, "exactly 3 x the big-batch gradient, because each micro-batch's loss was not divided", "clean"),
    ("optimizer step inside", steps_inside, "changed the weights", "clean"),
    ("frozen given a gradient", frozen_given_grad, "is frozen and has no gradient", "clean"),
]
