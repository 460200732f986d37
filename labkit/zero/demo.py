"""What notebook 04 runs on the ranks (layer 5 glue): live memory per phase, stage-3 events."""
import torch
import torch.distributed as dist

from labkit.models import lm_loss
from labkit.zero.runs import tiny_gpt

SMALL = dict(n_layer=2, n_embd=128, vocab=1024, seq=32)


def exact_meter(model, opt, gathered_storages=None):
    """labkit.memory.live.Meter whose activation count is the same on every run and rank.

    The plain Meter keys each saved tensor by its storage's address and size *when autograd
    saved it*. At stage 3 a layer saves views of its gathered weights (the head's transposed
    weight, the tied 512 x 64 embedding: 128 KiB in fp32), and those storages are freed (resized
    to 0) after the layer runs: the stale size kept counting, and the freed address, reused by
    the next gather or activation, made two saved tensors share a key, one of them dropped. Which
    address the allocator reuses changes between runs and ranks: the count moved in steps of the
    freed weights' sizes. Here each saved tensor is looked up when counted: its storage's size
    now, keyed by its address now (two live storages never share one), and the full-parameter
    buffers are left out (they are `gathered`, not activations): `gathered_storages()` gives their
    storages (default: a stage-3 model's full buffers)."""
    from labkit.memory.live import Meter

    class ExactMeter(Meter):
        def activations(self) -> int:
            if gathered_storages is not None:
                storages = gathered_storages()
            else:
                storages = [g.full.untyped_storage() for g in getattr(self.model, "groups", lambda: [])()]
            gathered = {st.data_ptr() for st in storages if st.nbytes()}
            seen, total = set(), 0
            for ref, _, _ in self.saved:
                t = ref()
                if t is None:
                    continue
                st = t.untyped_storage()
                key = st.data_ptr()
                if st.nbytes() == 0 or key in gathered or key in seen:
                    continue
                seen.add(key)
                total += st.nbytes()
            return total
    return ExactMeter(model, opt)


def live_steps(stage: int, steps: int = 2, mixed: bool = False, batch: int = 4, **model_kwargs):
    """Train a few steps of TinyGPT with ZeRO `stage`, emitting this rank's memory by category
    after forward, during backward and after the step (`exact_meter`, a labkit.memory.live.Meter)."""
    from labkit.zero import wrap
    torch.manual_seed(0)
    net, batch_fn = tiny_gpt(**{**SMALL, **model_kwargs})
    model, opt = wrap(net, torch.optim.Adam, stage=stage, mixed_precision=mixed, lr=1e-3)
    batches = [batch_fn(batch, 10 * step + dist.get_rank()) for step in range(steps)]
    return exact_meter(model, opt).train(batches, lambda out, y: lm_loss(out.float(), y))


def stage3_events(prefetch: bool = False, **model_kwargs) -> list:
    """One stage-3 training step with the hooks' events recorded: [{unit, kind, phase, t0, t1}]
    (kind: all-gather, prefetch, wait, compute, free, reduce-scatter), times from the step start."""
    from labkit.zero import wrap
    torch.manual_seed(0)
    net, batch_fn = tiny_gpt(**{**SMALL, **model_kwargs})
    model, opt = wrap(net, torch.optim.Adam, stage=3, lr=1e-3, prefetch=prefetch)
    x, y = batch_fn(4, dist.get_rank())
    lm_loss(model(x).float(), y).backward()          # first step: learns the forward order
    opt.step()
    opt.zero_grad()
    model.recording = True
    dist.barrier()
    lm_loss(model(x).float(), y).backward()
    opt.step()
    t0 = min(e["t0"] for e in model.events)
    return [{**e, "t0": e["t0"] - t0, "t1": e["t1"] - t0} for e in model.events]
