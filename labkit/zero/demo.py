"""What notebook 04 runs on the ranks (layer 5 glue): live memory per phase, stage-3 events."""
import torch
import torch.distributed as dist

from labkit.toy_models import lm_loss
from labkit.zero.runs import tiny_gpt

SMALL = dict(n_layer=2, n_embd=128, vocab=1024, seq=32)


def exact_meter(model, opt, gathered_storages=None):
    """labkit.memory.live.Meter (whose activation count is the same on every run and rank: see
    `Meter.activations`); `gathered_storages()` gives the full-parameter buffers to leave out
    (default: a stage-3 model's)."""
    from labkit.memory.live import Meter
    return Meter(model, opt, gathered_storages=gathered_storages)


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
    from labkit import trace
    from labkit.zero import wrap
    from labkit.zero.stage3 import Events
    torch.manual_seed(0)
    net, batch_fn = tiny_gpt(**{**SMALL, **model_kwargs})
    model, opt = wrap(net, torch.optim.Adam, stage=3, lr=1e-3, prefetch=prefetch)
    x, y = batch_fn(4, dist.get_rank())
    lm_loss(model(x).float(), y).backward()          # first step: learns the forward order
    opt.step()
    opt.zero_grad()
    dist.barrier()
    with trace.recording(Events(model)) as rec:       # the hooks' spans, recorded from outside
        lm_loss(model(x).float(), y).backward()
        opt.step()
    t0 = min(e["t0"] for e in rec.events)
    return [{**e, "t0": e["t0"] - t0, "t1": e["t1"] - t0} for e in rec.events]
