"""Answers to notebook 00's exercise: fn(t) -> the element-wise mean of t over all ranks."""
import torch
import torch.distributed as dist

import labkit


def right_clone(t):
    t = t.clone()
    dist.all_reduce(t)
    return t / labkit.world_size()


def right_in_place(t):
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return t


def right_gather(t):
    every = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(every, t)
    return torch.stack(every).mean(dim=0)


def right_avg_op(t):                     # gloo has ReduceOp.AVG for floating tensors (torch 2.13)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t


def stub(t):
    raise NotImplementedError("exercise: replace this line with your code")


def sum_only(t):
    dist.all_reduce(t)
    return t


def unchanged(t):
    return t


def divided_twice(t):
    dist.all_reduce(t)
    return t / labkit.world_size() / labkit.world_size()


def maximum(t):
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t


def hard_coded_two(t):                   # right on 2 ranks only
    dist.all_reduce(t)
    return t / 2


def no_return(t):
    dist.all_reduce(t)
    t /= labkit.world_size()


def mean_of_elements(t):
    dist.all_reduce(t)
    return t.mean() / labkit.world_size()


def reduce_to_zero(t):
    dist.reduce(t, dst=0)
    return t / labkit.world_size()


def crashes(t):
    return t.reshape(3, -1)


def only_rank_zero(t):
    if labkit.rank() == 0:
        dist.all_reduce(t)
    return t / labkit.world_size()


def raises_on_one_rank(t):
    if labkit.rank() == 1:
        raise ValueError("rank 1 has no data")
    dist.all_reduce(t)
    return t / labkit.world_size()


RIGHT = [("clone", right_clone), ("in-place", right_in_place), ("all_gather", right_gather),
         ("ReduceOp.AVG", right_avg_op)]
WRONG = [
    ("stub", stub, "not implemented yet", "clean"),
    ("sum only", sum_only, "x the mean, the sum over ranks: divide by the world size", "clean"),
    ("unchanged", unchanged, "returned its own values unchanged", "clean"),
    ("divided twice", divided_twice, "divide by the world size once", "clean"),
    ("maximum", maximum, "the maximum over ranks", "clean"),
    ("hard-coded 2 on 4 ranks", hard_coded_two, "2 x the mean", "clean"),
    ("no return", no_return, "returned None", "clean"),
    ("mean of the elements", mean_of_elements, "element by element", "clean"),
    ("dist.reduce", reduce_to_zero, "rank 0 got the mean, so the sum reached only some ranks", "clean"),
    ("crash", crashes, "failed on rank 0: RuntimeError: shape '[3, -1]'", "clean"),
    ("only rank 0 all-reduces", only_rank_zero, "hung: rank 0 stuck in all_reduce()", "hang"),
    ("raises on rank 1", raises_on_one_rank, "failed on rank 1: ValueError: rank 1 has no data", "hang"),
]
