"""DDP against one process on the global batch (layer 5 glue, runs inside a rank).

The claim to test: N ranks, each on its own 1/N of the global batch, with gradients averaged,
take exactly the steps that one process takes on the whole global batch (the mean of the
per-rank mean losses is the global mean loss when the shards have equal size). Each rank
also trains that single-process reference itself (a copy of rank 0's initial weights on the
full batch, as cs336's tests do) and compares after every step.
"""
import contextlib

import torch
import torch.distributed as dist

from labkit.ddp.data_parallel import STRATEGIES, NaiveDDP, trainable
from labkit.models import AwkwardNet, awkward_batch, lm_loss


def _model(seed: int, with_unused: bool):
    torch.manual_seed(seed)
    return AwkwardNet(with_unused=with_unused)


def max_param_diff(a, b) -> tuple:
    """(largest |a - b| over all parameters, name of the parameter where it is)."""
    pb = dict(b.named_parameters())
    worst, where = 0.0, None
    for name, p in a.named_parameters():
        d = (p.detach() - pb[name].detach()).abs().max().item()
        if where is None or d > worst:
            worst, where = d, name
    return worst, where


def train_parity(strategy="bucketed", steps: int = 4, micro_batches: int = 1, batch: int = 3,
                 with_unused: bool = False, lr: float = 0.1, seed: int = 0, **options) -> dict:
    """Train AwkwardNet `steps` steps with a labkit DDP strategy (a name of STRATEGIES) or with
    `strategy(model)`, a learner's function that averages gradients after backward, and the
    single-process reference alongside. `batch` rows per rank per micro-batch.

    Returns {"diffs": max |DDP - reference| after each step, "where": the parameter of each}.
    A named strategy starts from different weights on each rank (its broadcast must fix that);
    a learner's function starts from identical ones.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    named = isinstance(strategy, str)
    model = _model(seed + (rank if named else 0), with_unused)
    ref = _model(seed, with_unused)                        # rank 0's initial weights
    ddp = STRATEGIES[strategy](model, **options) if named else None
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=0.9)
    diffs, where = [], []
    for step in range(steps):
        x, y = awkward_batch(n * micro_batches * batch, seed=1000 + step)
        lm_loss(ref(x), y).backward()                      # one process, global batch
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        mine = slice(rank * micro_batches * batch, (rank + 1) * micro_batches * batch)
        xs, ys = x[mine].split(batch), y[mine].split(batch)
        for k in range(micro_batches):
            last = k == micro_batches - 1
            ctx = ddp.no_sync() if (named and not last) else contextlib.nullcontext()
            with ctx:
                (lm_loss((ddp or model)(xs[k]), ys[k]) / micro_batches).backward()
        if named:
            ddp.sync_gradients()
        else:
            strategy(model)
        opt.step()
        opt.zero_grad(set_to_none=True)
        d, name = max_param_diff(model, ref)
        diffs.append(d)
        where.append(name)
    return {"diffs": diffs, "where": where}


def train_skipping(skip: str = None, steps: int = 2, batch: int = 3, lr: float = 0.1):
    """The naive DDP loop, except that the gradient of parameter `skip` is never all-reduced
    (a deliberate bug): each rank then updates it with its own local gradient and the
    replicas drift apart. Returns this rank's model, for `labkit.check.replicas_in_sync`."""
    rank, n = dist.get_rank(), dist.get_world_size()
    model = _model(rank, False)
    NaiveDDP(model)                                       # broadcast rank 0's weights
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = awkward_batch(n * batch, seed=1000 + step)
        mine = slice(rank * batch, (rank + 1) * batch)
        lm_loss(model(x[mine]), y[mine]).backward()
        for name, p in trainable(model):
            if name != skip:                              # the bug, when skip is set
                dist.all_reduce(p.grad)
                p.grad.div_(n)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model
