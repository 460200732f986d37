"""Answers to notebook 03's exercise: fn(model), called after loss.backward() on every rank,
leaves in each parameter's .grad the mean of that gradient over the ranks."""
import os

import torch
import torch.distributed as dist

import labkit


def right_loop(model):
    n = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= n


def right_flat(model):
    """One all-reduce of every gradient flattened together, then copied back."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= labkit.world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def right_avg_op(model):
    for p in model.parameters():
        if p.requires_grad and p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


def stub(model):
    raise NotImplementedError("exercise: replace this line with your code")


def none_grad(model):                          # the frozen and the unused parameter have none
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def sum_only(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


def zero_fill(model):                          # gives the frozen parameter a gradient
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def divide_only(model):
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= dist.get_world_size()


def copy_not_written_back(model):
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.clone()
            dist.all_reduce(g)
            g /= dist.get_world_size()


def averages_the_weights(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.data)
            p.data /= dist.get_world_size()


def divided_twice(model):
    n = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= n * n


def weights_only(model):                       # forgets the biases
    for p in model.parameters():
        if p.grad is not None and p.dim() > 1:
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()


def maximum(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)


def only_rank_zero(model):
    if labkit.rank() == 0:
        right_loop(model)


def dies_on_rank_one(model):                   # rank 1's process ends; rank 0 then loses its peer
    if labkit.rank() == 1:
        os._exit(3)
    right_loop(model)


RIGHT = [("loop", right_loop), ("one flat all-reduce", right_flat), ("ReduceOp.AVG", right_avg_op)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("None gradient", none_grad, "'frozen' has no gradient (.grad is None", "clean"),
    ("sum only", sum_only, "the sum over ranks: divide by the world size", "clean"),
    ("zero-filled frozen gradient", zero_fill, "'frozen' is frozen (requires_grad=False) and has no "
     "gradient on any rank, but your function gave it one", "clean"),
    ("divides without all-reduce", divide_only, "all-reduce it (sum over the ranks) before dividing", "clean"),
    ("all-reduced copy not written back", copy_not_written_back,
     "still holds this rank's own gradient", "clean"),
    ("averages the weights", averages_the_weights, "all-reduce p.grad itself", "clean"),  # equal weights: a no-op
    ("divided twice", divided_twice, "divide by the world size once", "clean"),
    ("biases forgotten", weights_only, "'fc1.bias' still holds this rank's own gradient", "clean"),
    ("ReduceOp.MAX", maximum, "differs from the mean gradient over ranks", "clean"),
    ("only rank 0", only_rank_zero, "hung: rank 0 stuck in all_reduce()", "hang"),
    ("rank 1 dies", dies_on_rank_one, "failed on rank 1: RankDied", "crash"),
]
