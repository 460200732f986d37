"""One configuration of the memory tricks, trained on this rank (layer 3, inside a rank).

    row = cluster.run(labkit.tricks.runs.run, Config(precision="mixed", checkpointing="full"))

Data parallel over the cluster (the same config on every rank, each rank its own batch): after
the last micro-batch every gradient is all-reduced and averaged (labkit.zero.wrap for the ZeRO
point). The first step creates the optimizer state; the second runs under torch's MemTracker
(`labkit.memory.peaks`), which tags every storage created during the step; then `timed` steps
run untracked for the time (each step's seconds on the slowest rank in `slowest_s`).

Peak by category = what persists through the step (`labkit.memory.measure` before it: params,
master, m, v, 8-bit scales) + what the step creates, at its highest point (gradients,
activations, temporaries). `stored` is the activation bytes alive right after the first
micro-batch's forward: what was saved for backward (Korthikanti's count).
"""
import time

import torch
import torch.distributed as dist

from labkit.memory.breakdown import Breakdown
from labkit.toy_models import GPTConfig, TinyGPT, lm_loss, token_batch
from labkit.tricks import checkpointing, offload, precision
from labkit.tricks.formulas import Config, Shape

LR = 1e-3


def optimizer_class(config: Config):
    if config.optimizer == "adam8bit":
        from labkit.tricks.quant8 import Adam8bit
        return Adam8bit, dict(lr=LR)
    return torch.optim.AdamW, dict(lr=LR, weight_decay=0.0, foreach=False)


def build(config: Config, shape: Shape = Shape(), seed: int = 0):
    """(model, optimizer) with the config's tricks applied; same initial weights on every rank."""
    torch.manual_seed(seed)
    model = TinyGPT(GPTConfig(**shape.gpt_kwargs()))
    checkpointing.apply(model, config.checkpointing)          # math attention: scores are stored
    cls, kw = optimizer_class(config)
    mixed = config.precision == "mixed"
    if config.zero:
        import labkit.zero
        return labkit.zero.wrap(model, cls, stage=config.zero, mixed_precision=mixed, **kw)
    if config.offload:
        opt = offload.Offloaded(model.parameters(), cls, **kw)
        return (model.to(precision.HALF) if mixed else model), opt
    if mixed:
        return precision.to_mixed(model, cls, **kw)
    if config.precision == "fp16":
        return precision.to_mixed(model, cls, dtype=torch.float16, **kw)
    return model, cls(model.parameters(), **kw)


def train_step(model, opt, x, y, config: Config, after_forward=None, next_micro=None,
               sync: bool = True) -> dict:
    """One optimizer step over `config.micro` micro-batches of (x, y); seconds by phase.
    `after_forward()` is called after the first micro-batch's forward, `next_micro()` before
    each later one's (for the memory tracker)."""
    t0 = time.perf_counter()
    loss_sum = 0.0
    scaler = getattr(opt, "loss_scaler", None)          # fp16: the loss is scaled
    for i, (xs, ys) in enumerate(zip(x.chunk(config.micro), y.chunk(config.micro))):
        if i and next_micro is not None:
            next_micro()
        with precision.forward_context(config.precision):
            logits = model(xs)
        loss = lm_loss(logits.float(), ys) / config.micro
        del logits
        if i == 0 and after_forward is not None:
            after_forward()
        (scaler.scale(loss) if scaler is not None else loss).backward()
        loss_sum += loss.item()
    t1 = time.perf_counter()
    if sync and not config.zero and dist.is_initialized() and dist.get_world_size() > 1:
        n = dist.get_world_size()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= n
    t2 = time.perf_counter()
    if scaler is not None:
        scaler.step(opt)                     # skipped (weights untouched) if a gradient is inf/NaN
        scaler.update()
    else:
        opt.step()
    if config.zero:
        opt.zero_grad()
    else:
        for p in model.parameters():
            p.grad = None
    t3 = time.perf_counter()
    return {"compute": t1 - t0, "comm": t2 - t1, "optimizer": t3 - t2, "step": t3 - t0, "loss": loss_sum}


def _cat(snap: dict, name: str) -> int:
    return sum(v for k, v in snap.items() if str(getattr(k, "value", k)).upper() == name.upper()
               or str(k).split(".")[-1].upper() == name.upper())


def tracked_step(model, opt, x, y, config: Config) -> tuple:
    """(peak Breakdown, stored activation bytes) of one step, under MemTracker."""
    from labkit.memory.peaks import _tracker
    held = offload.measure(model, opt)
    import warnings
    mt = _tracker()
    mt.track_external(model)
    after_fwd = []
    with mt, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Expected a tensor")   # MemTracker on a None output
        train_step(model, opt, x, y, config,
                   after_forward=lambda: after_fwd.append(dict(next(iter(mt.get_tracker_snapshot("current").values())))),
                   next_micro=mt.reset_mod_stats)        # MemTracker tracks one forward per module
    snap = next(iter(mt.get_tracker_snapshot("peak").values()))
    stored = _cat(after_fwd[0], "Activation") if after_fwd else 0
    peak = Breakdown(params=held.params, grads=held.grads + _cat(snap, "Gradient"), master=held.master,
                     momentum=held.momentum, variance=held.variance, other=held.other,
                     buffers=held.buffers, activations=_cat(snap, "Activation") + _cat(snap, "Other"),
                     temporary=_cat(snap, "Temp") + _cat(snap, "Optstate"), on_host=held.on_host,
                     label=f"peak {config.code}")
    return peak, stored


def run(config: Config, shape: Shape = Shape(), timed: int = 2, track: bool = True, seed: int = 0) -> dict:
    """Build, one warm-up step, one tracked step (peak by category; skipped when `track` is
    False), `timed` steps (seconds of each in `steps_s`)."""
    st = prepare(config, shape, track, seed)
    return finish(config, st, [train_step(st["model"], st["opt"], st["x"], st["y"], config) for _ in range(timed)])


def prepare(config: Config, shape: Shape = Shape(), track: bool = True, seed: int = 0) -> dict:
    """The model and optimizer of `config` after one warm-up step (which creates the optimizer
    state) and, when `track`, one step under the memory tracker: what `finish` needs."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    model, opt = build(config, shape, seed)
    x, y = token_batch(shape.batch, shape.seq, shape.vocab_size, seed=seed + 100 + rank)
    losses = [train_step(model, opt, x, y, config)["loss"]]
    peak, stored = tracked_step(model, opt, x, y, config) if track else (None, 0)
    return {"model": model, "opt": opt, "x": x, "y": y, "losses": losses, "peak": peak,
            "stored": stored, "rank": rank}


def finish(config: Config, st: dict, times: list) -> dict:
    """The row of one configuration from `prepare`'s state and its timed steps."""
    import labkit
    model, opt, rank, peak = st["model"], st["opt"], st["rank"], st["peak"]
    best = min(times, key=lambda t: t["step"]) if times else {}
    held = offload.measure(model, opt, label=f"held {config.code}")
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    slowest = slowest_steps([t["step"] for t in times])
    row = {"config": config, "rank": rank, "peak": peak, "stored": st["stored"], "held": held,
           "seconds": best, "steps_s": [t["step"] for t in times], "slowest_s": slowest,
           "losses": st["losses"] + [t["loss"] for t in times], "n_params": n_params,
           "sizes": [p.numel() for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad],
           "offload_seconds": dict(getattr(opt, "seconds", {})), "moved": dict(getattr(opt, "moved", {})),
           "checksum": param_checksum(model), "steps": 2 + len(times)}
    if rank == 0:
        mid, lo, hi = spread(slowest)
        labkit.emit(trick=config.code, peak_device=peak.device if peak else 0,
                    step_s=mid, step_lo=lo, step_hi=hi)
    return row


def slowest_steps(seconds: list) -> list:
    """Each timed step's seconds on the slowest rank (a max all-reduce: one small collective,
    every rank calls it with as many steps), or this rank's own outside a process group."""
    if not seconds or not dist.is_initialized() or dist.get_world_size() == 1:
        return list(seconds)
    import labkit
    t = torch.tensor(seconds, dtype=torch.float64, device=labkit.device())   # the group's device
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def spread(seconds: list) -> tuple:
    """(median, fastest, slowest) of some step times; zeros for none."""
    if not seconds:
        return 0.0, 0.0, 0.0
    s = sorted(seconds)
    mid = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    return mid, s[0], s[-1]


def param_checksum(model) -> float:
    """Sum of every distinct parameter, in float64: equal weights give equal sums."""
    with torch.no_grad():
        return float(sum(p.double().sum() for p in {id(p): p for p in model.parameters()}.values()))


def one_process(config: Config, shape: Shape, world_size: int, steps: int, seed: int = 0) -> float:
    """The reference: one process, no collective, each step on the global batch (every rank's
    sequences of `run`); returns the parameters' checksum after `steps` steps."""
    model, opt = build(config, shape, seed)
    xs, ys = zip(*(token_batch(shape.batch, shape.seq, shape.vocab_size, seed=seed + 100 + r)
                   for r in range(world_size)))
    big = Config(**{**config.__dict__, "micro": config.micro * world_size})   # same micro-batch size
    for _ in range(steps):
        train_step(model, opt, torch.cat(xs), torch.cat(ys), big, sync=False)
    return param_checksum(model)


def run_many(configs, shape: Shape = Shape(), timed: int = 2, track=True) -> list:
    """`run` for each config (one call to the cluster for all of them), with the timed steps
    taken in turns: one step of each config, then the next round, so that a burst of load on a
    shared machine slows every config alike instead of one. `track`: one bool for all, or one
    per config (a config whose memory is already known is only timed). With timed steps and the
    first config tracked, one untimed tracked warm-up of it comes first: first calls (lazy
    imports, the tracker, allocator growth) would otherwise make the baseline slow and every
    ratio to it look better than it is."""
    configs = list(configs)
    tracks = list(track) if isinstance(track, (list, tuple)) else [track] * len(configs)
    if len(tracks) != len(configs):
        raise ValueError(f"track: one flag per config ({len(configs)}), got {len(tracks)}")
    if configs and timed and tracks[0]:
        model, opt = build(configs[0], shape)
        x, y = token_batch(shape.batch, shape.seq, shape.vocab_size)
        tracked_step(model, opt, x, y, configs[0])
        del model, opt
    states = [prepare(c, shape, t) for c, t in zip(configs, tracks)]
    times = [[] for _ in configs]
    for _ in range(timed):
        for c, st, ts in zip(configs, states, times):
            ts.append(train_step(st["model"], st["opt"], st["x"], st["y"], c))
    return [finish(c, st, ts) for c, st, ts in zip(configs, states, times)]


def loss_curve(optimizer: str, steps: int = 30, shape: Shape = Shape(batch=4), seed: int = 0) -> list:
    """Training loss per step with fp32 Adam or 8-bit Adam (fp32 model, one fixed batch per
    step drawn from a small fixed set of sequences, so the loss falls)."""
    cfg = Config(optimizer=optimizer)
    model, opt = build(cfg, shape, seed)
    rank = dist.get_rank() if dist.is_initialized() else 0
    data = [token_batch(shape.batch, shape.seq, shape.vocab_size, seed=seed + 7 * k + rank) for k in range(4)]
    return [train_step(model, opt, *data[i % 4], cfg)["loss"] for i in range(steps)]
