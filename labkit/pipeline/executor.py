"""Run any valid schedule on real ranks (layer 3: needs torch and a process group).

    results = cluster.run(run_schedule, one_f_one_b(4, 8), pad=0.01)   # on every rank
    t = timeline_of(results, s)       # in the notebook: a measured Timeline, like simulate()'s

Rank r holds chunks c = 0..v-1, i.e. virtual stages c*p + r of `mlp(layers)` cut into p*v
parts. Activations go forward and gradients backward with point-to-point calls: each send is
posted with `isend` and waited for at the end of the step, each receive is an `irecv` posted
`prefetch` actions ahead and waited for when its action needs the tensor. A blocking `send`
would wait for the peer's receive, and on gloo two ranks that both send first (1F1B's steady
state) would wait for ever.

A zero-bubble I computes the input gradient and keeps each layer's output gradient; its W
computes the weight gradients from those alone (`labkit.pipeline.backward`), so I + W does
the work of one fused B.

`pad` makes compute time uniform: each action computes for real, then sleeps until `pad`
seconds per layer have passed (forward and I and W: 1 x, B: 2 x), so four ranks sharing two
cores still follow the schedule's ideal timing and the gradients stay real.
"""
import time

import labkit
from labkit.pipeline.backward import backward_input, backward_weight
from labkit.pipeline.model import batch, microbatch_loss, mlp, reference_grads, split
from labkit.pipeline.schedules import compute_only
from labkit.pipeline.validate import ensure_valid

__all__ = ["run_schedule"]

_KINDS = {"F": 0, "B": 1}        # message tags: (kind, micro-batch, producing virtual stage)


def _tag(kind: str, mb: int, vs: int, m: int, nv: int) -> int:
    return (_KINDS[kind] * m + mb) * nv + vs


class _Memory:
    """Bytes autograd saves for backward in the stage's layers (parameters and the loss not
    counted), per (micro-batch, chunk) set; the peak; the largest set of each chunk."""

    def __init__(self, params):
        self.params = {p.data_ptr() for p in params}
        self.live, self.peak, self.held, self.set_bytes = 0, 0, {}, {}

    def hooks(self, key):
        import torch
        seen = set()

        def pack(t):
            view = (t.data_ptr(), t.numel())           # a micro-batch is a view of the batch:
            size = t.numel() * t.element_size()         # count the view, not the whole storage
            if t.data_ptr() not in self.params and view not in seen:
                seen.add(view)
                self.held[key] = self.held.get(key, 0) + size
                self.live += size
                self.peak = max(self.peak, self.live)
            return t
        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

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


def _step(s, rank, parts, xs, ys, pad, record, live, prefetch):
    """One training step of schedule s on this rank. Returns (intervals, waits, _Memory, loss)."""
    import torch
    import torch.distributed as dist
    import labkit
    m, nv = s.microbatches, s.virtual_stages
    last = nv - 1
    shape = xs[0].shape
    box, inp, out, grad, kept, pending, log, waits = {}, {}, {}, {}, {}, [], [], []
    loss_sum = 0.0
    mem = _Memory([q for part in parts.values() for q in part.parameters()])

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
        t = time.perf_counter()
        work.wait()
        waits.append((t, time.perf_counter(), kind, mb, src_vs))
        return buf

    def put(kind, mb, vs, dst_vs, tensor):
        dst = s.place(dst_vs)[0]
        if dst == rank:
            box[(kind, mb, vs)] = tensor
        else:
            pending.append((dist.isend(tensor.contiguous(), dst, tag=_tag(kind, mb, vs, m, nv)), tensor))

    for k, a in enumerate(s.actions[rank]):
        post(k + 1 + prefetch)
        c, mb = a.chunk, a.mb
        vs, key, part = s.vstage(rank, c), (a.mb, a.chunk), parts[a.chunk]
        layers = len(part)
        if a.kind == "F":
            x = xs[mb] if vs == 0 else get("F", mb, vs - 1).requires_grad_(True)
            t0 = time.perf_counter()
            with mem.hooks(key):
                y = part(x)
            mem.done(key)
            if vs == last:
                y = microbatch_loss(y, ys[mb], m)
                loss_sum += float(y.detach())
            inp[key], out[key] = x, y
            _pad(t0, pad and pad * layers)
            t1 = time.perf_counter()
            if vs < last:
                put("F", mb, vs, vs + 1, y.detach())
        else:
            if a.kind in ("B", "I"):
                grad[key] = None if vs == last else get("B", mb, vs + 1)
            t0 = time.perf_counter()
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
            _pad(t0, pad and pad * layers * (2 if a.kind == "B" else 1))
            t1 = time.perf_counter()
            if a.kind in ("B", "I") and vs > 0:
                put("B", mb, vs, vs - 1, x.grad)
            if a.kind in ("B", "W"):
                mem.free(key)
                for d in (inp, out, grad):
                    d.pop(key, None)
        if record:
            log.append((t0, t1, a.kind, mb, c))
            if live:
                labkit.emit(pipeline=s.name, kind=a.kind, mb=mb, chunk=c, t0=t0, t1=t1)
    for work, _ in pending:
        work.wait()
    return log, waits, mem, loss_sum


def run_schedule(schedule, layers: int = 8, width: int = 64, microbatch_size: int = 4, sizes=None,
                 pad: float = None, warmup: int = 1, live: bool = True, check: bool = True,
                 prefetch: int = 2, repeats: int = 1, frozen=1) -> dict:
    """Run one training step of `schedule` on this rank (call on every rank: cluster.run).

    The model is `mlp(layers, width, frozen=frozen)` cut into stages x chunks parts (`sizes`: layers per part,
    for an unequal cut); the batch is m micro-batches of `microbatch_size` rows. `warmup`
    unrecorded, unpadded steps come first, then `repeats` timed steps (each between barriers, the slowest rank's), the last recorded.
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
    times = []
    for step in range(warmup + repeats):
        model.zero_grad(set_to_none=True)
        dist.barrier()
        start = time.perf_counter()
        log, waits, mem, loss = _step(s, rank, parts, xs, ys, pad if step >= warmup else None,
                                       step == warmup + repeats - 1, live, prefetch)
        dist.barrier()
        if step >= warmup:
            took = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=x.device)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times.append(float(took))
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
