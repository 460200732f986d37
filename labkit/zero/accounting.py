"""What each rank should hold and send, from the formulas plus named extras (layer 3).

    exp = expected_memory(opt)        # opt from labkit.zero.wrap, inside a rank
    exp.formula                       # labkit.memory.model_states(Psi, zero_stage=s, world_size=N)
    exp.padding, exp.frozen, exp.counters, exp.total
    measure(model, opt).model_state == exp.total.model_state    # to the byte

Psi counts trainable parameters (a tied weight once), as the formulas do. The extras:
padding   each flat buffer is padded to a multiple of N (at most N-1 elements): a full copy
          holds all of it, a shard (Psi + padding) / N elements where the formula has Psi / N
frozen    a frozen parameter is held (full at stages 0-2, its shard at stage 3) but has no
          gradient and no optimizer state
counters  torch's Adam keeps one 4-byte fp32 `step` tensor per parameter it updates (one per
          flat bucket here), which the formula leaves out ("other")
Traffic, per rank per optimizer step (`expected_traffic`), on the padded buffers:
stage 0 2(N-1)/N G; stages 1, 2 (N-1)/N (G + P); stage 3 (N-1)/N (2P + 2F + G) where P, G are
the trainable parameters' bytes in parameter / reduction dtype and F the frozen bytes;
with k micro-batches stages 2 and 3 reduce-scatter k times, stage 3 gathers 2k times.
"""
from dataclasses import dataclass


from labkit.memory.breakdown import Breakdown
from labkit.memory.formulas import model_states

STATES = {"Adam": 2, "AdamW": 2, "SGD": 1}   # fp32 state tensors per element (SGD: momentum)


@dataclass
class Expected:
    formula: Breakdown
    padding: Breakdown
    frozen: Breakdown
    counters: Breakdown

    @property
    def total(self) -> Breakdown:
        return self.formula + self.padding + self.frozen + self.counters


def sizes(opt) -> dict:
    """Element counts of this rank's flat buffers (from a wrapped optimizer)."""
    if getattr(opt, "stage", None) == 3:
        gs = opt.model.groups()
        train = [g.layout for g in gs if g.trainable]
        frozen = [g.layout for g in gs if not g.trainable]
        model = opt.model
    else:
        train, frozen, model = [b.layout for b in opt.buckets], [], opt.model
    frozen_full = sum(p.numel() for p in model.parameters() if not p.requires_grad) \
        if getattr(opt, "stage", None) != 3 else sum(f.numel for f in frozen)
    return dict(psi=sum(t.numel for t in train), train_padded=sum(t.size for t in train),
                pad=sum(t.padding for t in train), own_pad=sum(t.shard_padding for t in train),
                frozen=frozen_full, frozen_padded=sum(f.size for f in frozen),
                frozen_shard=sum(f.shard for f in frozen), buffers=len(train))


def _optimizer_name(opt) -> str:
    inner = type(opt.inner).__name__
    if inner == "SGD":
        return "momentum" if opt.inner.defaults.get("momentum") else "sgd"
    return inner.lower()


def expected_memory(opt) -> Expected:
    """Formula for this rank's model state, and each named extra, in bytes."""
    s, stage, n, mixed = sizes(opt), opt.stage, _world(opt), opt.mixed
    name = _optimizer_name(opt)
    # a policy's 'sharded' layout (FSDP2): fp32 shards are the masters: fp32's formula (mixed False)
    formula = model_states(s["psi"], precision="mixed" if mixed else "fp32", optimizer=name,
                           zero_stage=stage, world_size=n)
    ep = 2 if mixed else 4
    eg = ep
    n_states = {"adam": 2, "adamw": 2, "momentum": 1, "sgd": 0}[name]
    # a shard holds (Psi + padding) / N elements where the formula has Psi / N: every rank
    # holds padding / N more (a fraction that makes the formula's fraction whole)
    own = s["pad"] / n if stage else s["pad"]
    pad = Breakdown(params=ep * (s["pad"] / n if stage == 3 else s["pad"]),
                    grads=eg * (s["pad"] if stage < 2 else s["pad"] / n),
                    master=4 * own if mixed else 0,
                    momentum=4 * own if n_states >= 1 else 0,
                    variance=4 * own if n_states >= 2 else 0, label="padding")
    frozen = Breakdown(params=ep * (s["frozen_shard"] if stage == 3 else s["frozen"]),
                       label="frozen parameters")
    counters = Breakdown(other=4 * s["buffers"] if name in ("adam", "adamw") else 0,
                         label="Adam step counters")
    return Expected(formula, pad, frozen, counters)


def _world(opt) -> int:
    if hasattr(opt, "world"):
        return opt.world
    return opt.model.world


def expected_traffic(opt, micro_batches: int = 1) -> dict:
    """Bytes this rank should send per optimizer step, by collective, on the padded buffers."""
    s, stage, n, k = sizes(opt), opt.stage, _world(opt), micro_batches
    ep = 2 if opt.mixed else 4
    if stage == 3:                        # what is gathered (a policy's 'sharded' layout: 16-bit of fp32 shards)
        ep = opt.model.dtype.itemsize
    rd = opt.model.reduce_dtype if stage == 3 else (opt.buckets[0].grad_dtype if opt.buckets else None)
    eg = rd.itemsize if rd is not None else ep
    f = (n - 1) / n
    P, G = s["train_padded"] * ep, s["train_padded"] * eg
    if stage == 0:
        return {"all-reduce": 2 * f * G}
    if stage in (1, 2):
        return {"reduce-scatter": f * G * (k if stage == 2 else 1), "all-gather": f * P}
    return {"all-gather (forward)": f * (P + s["frozen_padded"] * ep) * k,
            "all-gather (backward)": f * (P + s["frozen_padded"] * ep) * k,
            "reduce-scatter": f * G * k}
