"""Answers to notebook 09's exercise: fn(model, x, y, micro) cuts this rank's batch into `micro`
micro-batches, accumulates their gradients and averages them over the ranks once."""
import torch
import torch.distributed as dist

from labkit.toy_models import lm_loss


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


def right_strided(model, x, y, micro):
    """Micro-batches of every micro-th row: each row once, another cut."""
    for i in range(micro):
        (lm_loss(model(x[i::micro]), y[i::micro]) / micro).backward()
    _average(model)


def right_autograd_grad(model, x, y, micro):
    """torch.autograd.grad per micro-batch, added into .grad by hand."""
    params = [p for p in model.parameters() if p.requires_grad]
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        gs = torch.autograd.grad(lm_loss(model(xs), ys) / micro, params)
        for p, g in zip(params, gs):
            p.grad = g if p.grad is None else p.grad + g
    _average(model)


# -- issue 33: these passed the checker before it looked at how the gradients were made ------
def whole_batch(model, x, y, micro):
    """One forward and backward on the whole local batch: right gradients, nothing accumulated."""
    lm_loss(model(x), y).backward()
    _average(model)


def losses_summed_one_backward(model, x, y, micro):
    """Every micro-batch's loss kept, one backward at the end: every graph alive at once."""
    total = sum(lm_loss(model(xs), ys) / micro for xs, ys in zip(x.chunk(micro), y.chunk(micro)))
    total.backward()
    _average(model)


def partner_rank(model, x, y, micro):
    """Averages with rank 1 - r by send/recv: right on 2 ranks only."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    other = 1 - dist.get_rank()
    for p in model.parameters():
        if p.grad is not None:
            buf = torch.empty_like(p.grad)
            reqs = [dist.isend(p.grad.clone(), other), dist.irecv(buf, other)]
            for q in reqs:
                q.wait()
            p.grad.add_(buf).div_(2)


def tied_reduced_twice(model, x, y, micro):
    """The parameters listed module by module: the tied weight (embed, head) all-reduced twice."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    n = dist.get_world_size()
    for m in model.modules():
        for p in m.parameters(recurse=False):
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= n


# -- new wrong answers --------------------------------------------------------------------
def world_size_written_in(model, x, y, micro):
    """Divides by 2, the notebook's world size, instead of dist.get_world_size()."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= 2


def retain_graph(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward(retain_graph=True)
    _average(model)


def forward_twice(model, x, y, micro):
    """A forward for the logged loss, another for backward."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        with torch.no_grad():
            lm_loss(model(xs), ys).item()
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)


def split_by_micro(model, x, y, micro):
    """x.split(micro): pieces of `micro` rows, not `micro` pieces."""
    for xs, ys in zip(x.split(micro), y.split(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)


def chunk_the_sequence(model, x, y, micro):
    """Cut along the sequence (dim 1), not the batch."""
    for xs, ys in zip(x.chunk(micro, dim=1), y.chunk(micro, dim=1)):
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)


def zero_grad_after(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    _average(model)
    model.zero_grad()


def detached_loss(model, x, y, micro):
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs).detach(), ys) / micro).backward()
    _average(model)


def reduce_first_micro(model, x, y, micro):
    """The all-reduce inside the loop, after the first micro-batch only."""
    n = dist.get_world_size()
    for i, (xs, ys) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
        (lm_loss(model(xs), ys) / micro).backward()
        if i == 0:
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= n


def broadcast_rank0(model, x, y, micro):
    """Rank 0's gradients sent to everyone: no average."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is not None:
            dist.broadcast(p.grad, 0)


def last_micro_reused(model, x, y, micro):
    """Every forward first (outputs kept in a list), then every backward."""
    outs = [model(xs) for xs in x.chunk(micro)]
    for out, ys in zip(outs, y.chunk(micro)):
        (lm_loss(out, ys) / micro).backward()
    _average(model)


def gather_and_average(model, x, y, micro):
    """Every gradient all-gathered and averaged, then all-reduced again to be safe: 2 collectives."""
    n = dist.get_world_size()
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is not None:
            parts = [torch.empty_like(p.grad) for _ in range(n)]
            dist.all_gather(parts, p.grad)
            p.grad.copy_(torch.stack(parts).mean(0))
            dist.all_reduce(p.grad)
            p.grad /= n


def reduce_into_a_copy(model, x, y, micro):
    """All-reduces a copy of each gradient and drops it: .grad keeps this rank's own."""
    for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
        (lm_loss(model(xs), ys) / micro).backward()
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.clone()
            dist.all_reduce(g)
            g /= dist.get_world_size()


RIGHT = [("chunk", right_chunk), ("index and AVG", right_index), ("flat", right_flat),
         ("strided micro-batches", right_strided), ("autograd.grad", right_autograd_grad)]
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
    # issue 33
    ("whole local batch at once", whole_batch, "from one forward and backward on the whole local batch of 6 sequences: nothing was accumulated", "clean"),
    ("losses summed, one backward", losses_summed_one_backward, "3 forwards ran before the first backward", "clean"),
    ("average with partner rank 1 - r", partner_rank, "in the second case, on a world of size 1", "clean"),
    ("tied weight all-reduced twice", tied_reduced_twice, "all-reduced one gradient 2 times", "clean"),
    # new
    ("world size written as 2", world_size_written_in, "x the mean: divide by dist.get_world_size(), not by a number", "clean"),
    ("retain_graph=True", retain_graph, "saved activations were alive at once (retain_graph=True", "clean"),
    ("a second forward for the logged loss", forward_twice, "ran 6 forwards for 3 micro-batches", "clean"),
    ("x.split(micro)", split_by_micro, "your gradients are 0.667 x one process's on the global batch, every one of them", "clean"),
    ("cut along the sequence", chunk_the_sequence, "cut the batch dimension (dim 0), not the sequence", "clean"),
    ("zero_grad after the all-reduce", zero_grad_after, "has no gradient (.grad is None) after your function", "clean"),
    ("detached logits", detached_loss, "failed on rank 0: RuntimeError: element 0 of tensors does not require grad", "clean"),
    ("all-reduce after the first micro-batch only", reduce_first_micro, "differs from one process's gradient", "clean"),
    ("rank 0's gradients broadcast", broadcast_rank0, "rank 0: your gradients are this rank's own", "clean"),
    ("every forward first, then every backward", last_micro_reused, "3 forwards ran before the first backward", "clean"),
    ("all-reduced a copy", reduce_into_a_copy, "your gradients are this rank's own", "clean"),
    ("all-gather, then all-reduce again", gather_and_average, "the bytes of one all-reduce of each gradient", "clean"),
]
