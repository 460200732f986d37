"""DDP against one process on the global batch (layer 5 glue, runs inside a rank).

The claim to test: N ranks, each on its own 1/N of the global batch, with gradients averaged,
take exactly the steps that one process takes on the whole global batch (the mean of the
per-rank mean losses is the global mean loss when the shards have equal size). Each rank
also trains that single-process reference itself (a copy of rank 0's initial weights, as
cs336's tests do) and compares after every step. The reference runs forward and backward on
every rank's every micro-batch in turn, each loss divided by their count: the same gradient
as one pass over the global batch, and it can use a parameter where a rank does.
"""
import contextlib

import torch
import torch.distributed as dist

from labkit.ddp.data_parallel import STRATEGIES, NaiveDDP, trainable
from labkit.toy_models import AwkwardNet, awkward_batch, lm_loss

# Where `AwkwardNet.unused` is used in forward (`with_unused=`): True (never: the parameter
# is unused on every rank), "early" (in every micro-batch but the last: its gradient is
# accumulated under no_sync only), "rank0" (only on rank 0: unused on the others).
USES = (False, True, "early", "rank0")


class _Net(AwkwardNet):
    """AwkwardNet whose `unused` parameter joins forward while `use_unused` is set."""

    use_unused = False

    def forward(self, tokens):
        x = self.embed(tokens) + self.frozen
        if self.use_unused:
            x = x + self.unused.sum()            # a real gradient (not one that sums to ~0)
        x = x + self.fc2(torch.tanh(self.fc1(x)))
        return self.head(x)


def _model(seed: int, with_unused):
    torch.manual_seed(seed)
    return _Net(with_unused=bool(with_unused))


def _uses(with_unused, rank: int, k: int, micro_batches: int) -> bool:
    """Whether rank `rank`'s micro-batch `k` uses the `unused` parameter."""
    return (with_unused == "early" and k < micro_batches - 1) or (with_unused == "rank0" and rank == 0)


def _optimizer(kind: str, params, lr: float):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if kind == "adamw":                      # weight decay moves any parameter that has a .grad
        return torch.optim.AdamW(params, lr=_optimizer_lr(kind, lr), weight_decay=0.5)
    raise ValueError(f"optimizer must be 'sgd' or 'adamw', not {kind!r}")


def _optimizer_lr(kind: str, lr: float) -> float:
    """The learning rate `_optimizer(kind, ..., lr)` steps with."""
    return lr / 10 if kind == "adamw" else lr


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
                 with_unused=False, lr: float = 0.1, seed: int = 0, optimizer: str = "sgd",
                 **options) -> dict:
    """Train AwkwardNet `steps` steps with a labkit DDP strategy (a name of STRATEGIES) or with
    `strategy(model)`, a learner's function that averages gradients after backward, and the
    single-process reference alongside. `batch` rows per rank per micro-batch; `with_unused`
    one of USES; `optimizer` "sgd" (with momentum) or "adamw" (with weight decay).

    Returns {"diffs": max |DDP - reference| after each step, "where": the parameter of each,
    "grad_none": names of the parameters whose .grad was None after the last sync,
    "over_bound": for "adamw", the first step's worst element as a fraction of its derived
    bound, numerics.one_step_over_bound (<= 1 passes; None for "sgd")}.
    A named strategy starts from different weights on each rank (its broadcast must fix that);
    a learner's function starts from identical ones.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    named = isinstance(strategy, str)
    model = _model(seed + (rank if named else 0), with_unused)
    ref = _model(seed, with_unused)                        # rank 0's initial weights
    ddp = STRATEGIES[strategy](model, **options) if named else None
    opt = _optimizer(optimizer, model.parameters(), lr)
    ref_opt = _optimizer(optimizer, ref.parameters(), lr)
    diffs, where, grad_none, over = [], [], [], None
    for step in range(steps):
        x, y = awkward_batch(n * micro_batches * batch, seed=1000 + step)
        shards = [(x[r * micro_batches * batch:(r + 1) * micro_batches * batch].split(batch),
                   y[r * micro_batches * batch:(r + 1) * micro_batches * batch].split(batch))
                  for r in range(n)]
        for r, (xs, ys) in enumerate(shards):              # one process, every micro-batch
            for k in range(micro_batches):
                ref.use_unused = _uses(with_unused, r, k, micro_batches)
                (lm_loss(ref(xs[k]), ys[k]) / (n * micro_batches)).backward()
        grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                 for k, p in ref.named_parameters()}
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        xs, ys = shards[rank]
        for k in range(micro_batches):
            last = k == micro_batches - 1
            model.use_unused = _uses(with_unused, rank, k, micro_batches)
            ctx = ddp.no_sync() if (named and not last) else contextlib.nullcontext()
            with ctx:
                (lm_loss((ddp or model)(xs[k]), ys[k]) / micro_batches).backward()
        if named:
            ddp.sync_gradients()
        else:
            strategy(model)
        grad_none = [name for name, p in trainable(model) if p.grad is None]
        opt.step()
        opt.zero_grad(set_to_none=True)
        d, name = max_param_diff(model, ref)
        if step == 0 and optimizer == "adamw":
            # AdamW's first step, element by element (numerics.one_step_over_bound): its later
            # steps have no derived bound. The decay p (1 - lr wd) rounds the same p the same way
            # in both runs; each gradient is a sum over the global batch's tokens, in another order
            from labkit.numerics import one_step_over_bound
            over = one_step_over_bound({k: p.detach() for k, p in model.named_parameters()},
                                       {k: p.detach() for k, p in ref.named_parameters()},
                                       grads, y.numel(), _optimizer_lr(optimizer, lr), "adam")
        diffs.append(d)
        where.append(name)
    return {"diffs": diffs, "where": where, "grad_none": grad_none, "over_bound": over}


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
