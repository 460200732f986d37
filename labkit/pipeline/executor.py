"""Run any valid schedule on real ranks, measured (layer 3: needs torch and a process group).

The algorithm is executor_core.run_actions; this file measures it from outside (each action's
interval, the receive waits, the activations saved for backward, the padding) and checks it.

    results = cluster.run(run_schedule, one_f_one_b(4, 8), pad=0.01)   # on every rank
    t = timeline_of(results, s)       # in the notebook: a measured Timeline, like simulate()'s

The model is `mlp(layers)` cut into p*v parts (rank r holds virtual stages c*p + r).

`pad` makes compute time uniform: each action computes for real, then sleeps until `pad`
seconds per layer have passed (forward and I and W: 1 x, B: 2 x), so four ranks sharing two
cores still follow the schedule's ideal timing and the gradients stay real.
"""
import contextlib
import time

import labkit
from labkit import trace
from labkit.pipeline.executor_core import _KINDS, _tag, run_actions  # noqa: F401 (importable here)
from labkit.pipeline.toy_mlp import batch, mlp, reference_grads, split
from labkit.pipeline.schedules import compute_only
from labkit.pipeline.validate import ensure_valid

__all__ = ["run_schedule"]

class _Memory:
    """Bytes autograd saves for backward in the stage's layers (parameters and the loss not
    counted), per (micro-batch, chunk) set; the peak; the largest set of each chunk."""

    def __init__(self, params):
        self.params = list(params)
        self.live, self.peak, self.held, self.set_bytes = 0, 0, {}, {}

    @contextlib.contextmanager
    def hooks(self, key):
        """Count one forward's saved tensors (a micro-batch is a view of the batch: per="view"
        counts the view, not the whole storage). Only frees lower `live`, and none runs inside
        a forward, so the peak is reached at a forward's end."""
        with trace.saved_bytes(exclude=self.params, per="view") as saved:
            yield
        self.held[key] = self.held.get(key, 0) + saved.bytes
        self.live += saved.bytes
        self.peak = max(self.peak, self.live)

    def done(self, key):
        """The forward of `key` = (micro-batch, chunk) is over: note its set's size."""
        chunk = key[1]
        self.set_bytes[chunk] = max(self.set_bytes.get(chunk, 0), self.held.get(key, 0))

    def free(self, key):
        self.live -= self.held.pop(key, 0)


def _pad(t0: float, seconds):
    if seconds:
        rest = t0 + seconds - time.perf_counter()
        if rest > 0:
            time.sleep(rest)


class _Measure:
    """executor_core's watcher: each action's interval (the last step's, `record`), sent live,
    padded to `pad` seconds per layer; receive waits; saved activations (`_Memory`)."""

    def __init__(self, s, mem, pad, record, live):
        self.s, self.mem, self.pad, self.record, self.live = s, mem, pad, record, live
        self.log, self.waits = [], []

    @contextlib.contextmanager
    def action(self, a, key, layers):
        t0 = time.perf_counter()
        yield
        _pad(t0, self.pad and self.pad * layers * (2 if a.kind == "B" else 1))
        t1 = time.perf_counter()
        if self.record:
            self.log.append((t0, t1, a.kind, a.mb, a.chunk))
            if self.live:                     # the live Gantt: the last step's only
                labkit.emit(pipeline=self.s.name, kind=a.kind, mb=a.mb, chunk=a.chunk, t0=t0, t1=t1)

    @contextlib.contextmanager
    def forward(self, key):
        with self.mem.hooks(key):
            yield
        self.mem.done(key)

    @contextlib.contextmanager
    def receive(self, kind, mb, src_vs):
        t = time.perf_counter()
        yield
        self.waits.append((t, time.perf_counter(), kind, mb, src_vs))

    def freed(self, key) -> None:
        self.mem.free(key)


def _step(s, rank, parts, xs, ys, pad, record, live, prefetch):
    """One training step of schedule s on this rank. Returns (intervals, waits, _Memory, loss)."""
    mem = _Memory([q for part in parts.values() for q in part.parameters()])
    watch = _Measure(s, mem, pad, record, live)
    loss = run_actions(s, rank, parts, xs, ys, prefetch, watch)
    return watch.log, watch.waits, mem, loss


def run_schedule(schedule, layers: int = 8, width: int = 64, microbatch_size: int = 4, sizes=None,
                 pad: float = None, warmup: int = 1, live: bool = True, check: bool = True,
                 prefetch: int = 2, repeats: int = 1, frozen=1, keep: str = "last") -> dict:
    """Run one training step of `schedule` on this rank (call on every rank: cluster.run).

    The model is `mlp(layers, width, frozen=frozen)` cut into stages x chunks parts (`sizes`: layers per part,
    for an unequal cut); the batch is m micro-batches of `microbatch_size` rows. `warmup`
    unrecorded, unpadded steps come first, then `repeats` timed steps (each between barriers, the
    slowest rank's); keep="last" returns the last one's intervals, keep="fastest" the shortest
    one's (every rank picks the same step: the times are the slowest rank's). Other programs
    on the machine only ever add time (a rank woken late), so the fastest of a few steps is
    the schedule's own bubble with the least of theirs in it.
    With check=True each rank compares its gradients with one process's on the whole batch.

    Returns this rank's intervals [(t0, t1, kind, mb, chunk)] on the machine's monotonic clock,
    receive waits, peak saved-activation bytes of its layers, the bytes one micro-batch saves
    in each chunk (`set_bytes`), the loss (last stage), the largest gradient difference and
    the parameters whose gradient is missing or extra."""
    import torch
    import torch.distributed as dist
    s = compute_only(ensure_valid(schedule))
    if s.layout == "dual":
        raise ValueError(f"{s.name} holds every stage on two ranks, whose gradients would need summing, "
                         "which this executor does not do: run its one-copy form, dualpipe_v, instead")
    rank, n = dist.get_rank(), dist.get_world_size()
    if n != s.stages:
        raise ValueError(f"the schedule has {s.stages} stages but the cluster has {n} ranks: build it "
                         f"for stages={n}, or start labkit.Cluster(world_size={s.stages})")
    dev = labkit.device()                        # this rank's GPU with NCCL, else the CPU
    model = mlp(layers, width, frozen=frozen).to(dev)
    cut = split(model, s.virtual_stages, sizes)
    parts = {c: cut[s.vstage(rank, c)] for c in range(s.chunks)}
    x, y = (t.to(dev) for t in batch(microbatch_size * s.microbatches, width))
    xs, ys = x.chunk(s.microbatches), y.chunk(s.microbatches)
    if keep not in ("last", "fastest"):
        raise ValueError(f"keep={keep!r}: say 'last' (the last timed step) or 'fastest' (the shortest one)")
    times, steps = [], []
    for step in range(warmup + repeats):
        model.zero_grad(set_to_none=True)
        dist.barrier()
        start = time.perf_counter()
        last = step == warmup + repeats - 1
        log, waits, mem, loss = _step(s, rank, parts, xs, ys, pad if step >= warmup else None,
                                       last or (keep == "fastest" and step >= warmup), live and last,
                                       prefetch)
        dist.barrier()
        if step >= warmup:
            took = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=x.device)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times.append(float(took))
            steps.append((start, log, waits))
    if keep == "fastest" and times:
        start, log, waits = steps[times.index(min(times))]
    out = {"rank": rank, "start": start, "intervals": log, "waits": waits, "peak_bytes": mem.peak,
           "set_bytes": [mem.set_bytes.get(c, 0) for c in range(s.chunks)],
           "times": times,
           "loss": loss, "pad": pad, "sizes": [len(cut[s.vstage(rank, c)]) for c in range(s.chunks)],
           "grad_diff": 0.0, "grad_mismatch": []}
    if check:
        ref, _ = reference_grads(mlp(layers, width, frozen=frozen).to(dev), x, y)
        for part in parts.values():
            for name, q in part.named_parameters():
                r = ref[name]
                if (q.grad is None) != (r is None):
                    out["grad_mismatch"].append(name)
                elif r is not None:
                    out["grad_diff"] = max(out["grad_diff"], float((q.grad - r).abs().max()))
    dist.barrier()
    return out
