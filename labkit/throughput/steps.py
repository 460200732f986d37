"""A training step timed phase by phase on every rank, and three deliberately slow runs.

    phases = timed_run(model, loader, steps=6)        # on each rank -> Phases (mean seconds)
    result = scenario("slow data")                    # on each rank -> dict for `diagnose`

Timers (`time.perf_counter`) wrap each phase: waiting on the DataLoader, forward + loss,
backward, waiting for the other ranks (a barrier: the time a faster rank would otherwise
spend inside the all-reduce waiting for a slower one), the gradient all-reduce (one flat
all-reduce, `labkit.ddp.FlatDDP`, so that communication is a phase of its own and not hidden
inside backward), and the optimizer step. The barrier costs one tiny collective per step.
On a GPU each timer would need `torch.cuda.synchronize()` first (kernels run asynchronously);
`timed_run` does it when the model is on CUDA. That path is untested on this CPU machine.

The three runs (each rank runs the same one):
- "slow data": items cost 15 ms each to "read" (`time.sleep`, standing for file reads and
  decoding, which wait rather than compute) and the loader has no workers;
- "communication": an embedding table of 1M parameters (4 MB of gradient) next to very little
  compute: the all-reduce dominates, as it does for large embedding tables;
- "memory": a batch of 24 sequences of 128 rows whose activations fill a device of
  `MEMORY_BUDGET` bytes (a tiny
  budget stands in for a full GPU; the peak is counted exactly by `labkit.memory.peak`).
"""
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

from labkit.throughput.data import SlowDataset
from labkit.throughput.verdict import Phases
from labkit.i18n import N_, tr

MEMORY_BUDGET = 16 * 2**20        # the device of the runs: 16 MiB (tiny on purpose)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_run(model: nn.Module, loader, steps: int = 6, lr: float = 0.01, warmup: int = 1) -> Phases:
    """Train `steps` steps of `model` (data parallel, one flat all-reduce per step) on batches
    (x, y) from `loader`; return the median seconds per phase over the steps after `warmup`
    (the median, so that one step slowed by another program does not decide)."""
    from labkit.ddp.data_parallel import FlatDDP
    ddp = FlatDDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    device = next(model.parameters()).device
    times = {k: [] for k in ("data", "forward", "backward", "wait", "comm", "optimizer")}
    it = iter(loader)
    for i in range(warmup + steps):
        t = [time.perf_counter()]
        try:
            x, y = next(it)
        except StopIteration:                     # a new epoch
            it = iter(loader)
            x, y = next(it)
        x, y = x.to(device), y.to(device)
        _sync(device); t.append(time.perf_counter())
        loss = _loss(ddp(x), y)
        _sync(device); t.append(time.perf_counter())
        loss.backward()
        _sync(device); t.append(time.perf_counter())
        dist.barrier()                            # wait: until the slowest rank is here too
        t.append(time.perf_counter())
        ddp.sync_gradients()
        _sync(device); t.append(time.perf_counter())
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device); t.append(time.perf_counter())
        if i >= warmup:
            for k, name in enumerate(times):
                times[name].append(t[k + 1] - t[k])
    return Phases(**{k: statistics.median(v) for k, v in times.items()})


def _loss(out, y):
    """Cross-entropy over the last dimension (one class per item, or per row of a sequence)."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


class EmbeddingBag(nn.Module):
    """A big table and a tiny head: little compute, a large dense gradient to all-reduce."""

    def __init__(self, rows: int = 125_000, dim: int = 8, classes: int = 10):
        super().__init__()
        self.table = nn.Embedding(rows, dim)        # dense gradient: rows x dim floats per step
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.head(self.table(ids).mean(dim=1))


def _mlp(width: int, classes: int = 10) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, classes))


SCENARIOS = {
    # name (shown translated: N_): (model maker, dataset kwargs, batch, loader workers)
    N_("slow data"): (lambda: _mlp(32), dict(n=256, width=32, wait_s=0.015), 8, 0),
    N_("communication"): (EmbeddingBag, dict(n=256, width=4, wait_s=0.0, ids=125_000), 8, 0),
    N_("memory"): (lambda: _mlp(256), dict(n=48, width=256, wait_s=0.0, rows=128), 24, 0),
}


def scenario(name: str, steps: int = 5, budget_bytes: int = MEMORY_BUDGET, seed: int = 0) -> dict:
    """On every rank: run scenario `name` (see SCENARIOS) and return
    {"phases": Phases, "peak_bytes": int, "budget_bytes": int} for `diagnose`."""
    from labkit.memory import peak
    if name not in SCENARIOS:
        raise ValueError(tr("scenario must be one of {known}, got {name!r}", known=sorted(SCENARIOS), name=name))
    make, data_kw, batch, workers = SCENARIOS[name]
    torch.manual_seed(seed)                       # same initial weights on every rank
    model = make()
    data = SlowDataset(**data_kw, seed=seed + dist.get_rank())
    loader = DataLoader(data, batch_size=batch, num_workers=workers)
    phases = timed_run(model, loader, steps=steps)
    x, y = next(iter(DataLoader(data, batch_size=batch)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def one_step():
        _loss(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    p = peak(one_step, model, opt, x, y)
    return {"phases": phases, "peak_bytes": int(p.total), "budget_bytes": int(budget_bytes)}


def profiled_scenario(name: str = "communication", steps: int = 5, seed: int = 0) -> dict:
    """On every rank: the communication share of scenario `name` twice, from the timers
    (`timed_run`) and from torch.profiler (`profiled_comm_share`) over the same kind of step.
    Returns {"timers": share, "profiler": share, "profiler_steps": each profiled step's share,
    "ops": collective operator names}; both shares are medians over the steps."""
    from labkit.ddp.data_parallel import FlatDDP
    from labkit.throughput.profile import profiled_comm_share
    make, data_kw, batch, workers = SCENARIOS[name]
    torch.manual_seed(seed)
    model = make()
    data = SlowDataset(**data_kw, seed=seed + dist.get_rank())
    timers = timed_run(model, DataLoader(data, batch_size=batch, num_workers=workers), steps=steps)
    ddp, opt = FlatDDP(model), torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(DataLoader(data, batch_size=batch, num_workers=workers))

    def step():
        x, y = next(it)
        _loss(ddp(x), y).backward()
        dist.barrier()                            # as in timed_run: waiting is not communication
        ddp.sync_gradients()
        opt.step()
        opt.zero_grad(set_to_none=True)
    step()                                        # warm-up outside the profile
    prof = profiled_comm_share(step, steps=steps)
    return {"timers": timers.share("comm"), "profiler": prof["share"], "profiler_steps": prof["step_shares"],
            "ops": prof["ops"]}


def load_memory_tracker() -> None:
    """On every rank: import torch's MemTracker (used by labkit.memory.peak on CPU). It loads
    sympy and torch's fake tensors: seconds, paid once per rank."""
    import torch.distributed._tools.mem_tracker  # noqa: F401
    from labkit.memory import peaks  # noqa: F401


def warm_up() -> None:
    """On every rank: start a DataLoader, make a collective and time one step, so that the
    first timed run does not pay for it."""
    loader = DataLoader(SlowDataset(n=4, wait_s=0.0), batch_size=2)
    for _ in loader:
        pass
    dist.barrier()
    timed_run(nn.Linear(4, 10), DataLoader(SlowDataset(n=8, width=4, wait_s=0.0), batch_size=4),
              steps=1)
