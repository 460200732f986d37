"""ZeRO stage 3: stage3_core.py's four hooks, with prefetch, mixed precision and tied weights (layer 3).

    model = Stage3(model, group=None, mixed_precision=False)     # or labkit.zero.wrap(..., stage=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)          # parameters() are this rank's shards

The idea (gather, compute, free, reduce-scatter, unit by unit) is in stage3_core.py; this file
adds what the lab's runs need beside it:

- tied weights: a parameter used by two units (a tied embedding) lives in the root unit, so it is
  gathered for the whole step and its gradient reduced once, summed over both uses; every
  attribute that referred to it becomes a view of the same buffer.
- the two mixed-precision layouts: `mixed_precision=True` (half shards, half gathers, fp32
  masters made by the optimizer from `master_init`) or a `policy` (labkit.zero.policy.Policy:
  'masters' or 'sharded' fp32 shards, gathered in param_dtype, inputs cast like FSDP2's
  cast_forward_inputs), and `reduce_dtype` for the reduce-scatter.
- `prefetch=True`: the next unit's all-gather starts (async) when a unit starts; on CPU that
  saves no time, the events show the order of the calls. gloo's worker thread fills the buffer,
  bumping its version counter, so `_wait` puts the counter back (views saved for backward stay
  valid).
- the events: `with trace.recording(Events(model)) as rec:` ... `rec.events` is one dict per
  hook call {unit, kind, t0, t1, phase, gathered} (kind: all-gather, prefetch, wait, compute,
  free, reduce-scatter), recorded from outside through labkit/trace.py.
"""
import torch
import torch.distributed as dist
import torch.nn as nn

from labkit import trace
from labkit.zero import flat as F
from labkit.zero.optim import HALF
from labkit.zero.units import Group as _CoreGroup
from labkit.zero.stage3_core import Stage3Core, Unit, _preserve, default_units  # noqa: F401 (importable here)


class Group(_CoreGroup):
    """A core group that also keeps `master_init`: its fp32 shard before any cast (masters)."""

    def __init__(self, named, refs, trainable, dtype, world, rank, shard_dtype=None):
        layout = F.Flat(named, world, rank)
        self.master_init = layout.flatten({n: p.detach() for n, p in named},
                                          dtype=torch.float32)[layout.lo:layout.hi].clone()
        super().__init__(named, refs, trainable, dtype, world, rank, shard_dtype)


class Events(trace.Recorder):
    """A labkit.trace recorder whose spans become Stage3's events, one dict per hook call."""

    def __init__(self, model, clock=None):
        super().__init__(clock)
        self.model, self.events = model, []

    def add_span(self, name, t0, t1, tags) -> None:
        m = self.model
        self.events.append(dict(unit=tags["unit"], kind=name, t0=t0, t1=t1,
                                phase="backward" if m._callback_queued else "forward",
                                gathered=m.gathered_bytes()))


class Stage3(Stage3Core):
    """The wrapped model: forward runs the original module with per-unit gather and free."""
    group_class = Group

    def __init__(self, module: nn.Module, group=None, mixed_precision: bool = False,
                 units=None, prefetch: bool = False, reduce_dtype=None, policy=None):
        if policy is not None and (mixed_precision or reduce_dtype is not None):
            raise ValueError("give either policy (labkit.zero.policy.Policy) or mixed_precision/reduce_dtype, not both")
        self.prefetch, self.policy, self.order = prefetch, policy, []
        if policy is not None:       # dtype: what is gathered and computed in; shard_dtype: parameters()
            self.mixed = policy.layout == "masters"
            self.dtype, self.shard_dtype, self.reduce_dtype = policy.param_dtype, policy.shard_dtype, policy.reduce
        else:
            self.mixed = mixed_precision
            self.dtype = self.shard_dtype = HALF if mixed_precision else torch.float32
            self.reduce_dtype = reduce_dtype or self.dtype
        super().__init__(module, group, units)
        if policy is not None:
            module.register_forward_pre_hook(self._cast_inputs, with_kwargs=True, prepend=True)

    def _build(self, units) -> list:
        """Each parameter to its nearest enclosing unit; one used by two units to the root."""
        names = [n for n, _ in units]
        unit_of = {}                          # module name -> unit index (nearest enclosing unit)
        for mname, _ in self.module.named_modules(remove_duplicate=False):
            unit_of[mname] = max((i for i, n in enumerate(names)
                                  if n == "" or mname == n or mname.startswith(n + ".")),
                                 key=lambda i: len(names[i]))
        refs, where, params = {}, {}, {}
        for mname, m in self.module.named_modules(remove_duplicate=False):
            for attr, p in m._parameters.items():
                if p is None:
                    continue
                params.setdefault(id(p), (f"{mname}.{attr}".lstrip("."), p))
                refs.setdefault(id(p), []).append((m, attr))          # tied: every reference
                where.setdefault(id(p), set()).add(unit_of[mname])
        assign = {k: (next(iter(w)) if len(w) == 1 else 0) for k, w in where.items()}
        out = [self._unit(name, module, [params[k] for k in params if assign[k] == i], refs)
               for i, (name, module) in enumerate(units)]
        return [u for u in out if u is not None]

    def _cast_inputs(self, module, args, kwargs):
        """A policy's forward takes its floating inputs in param_dtype (FSDP2's cast_forward_inputs)."""
        cast = lambda t: t.to(self.dtype) if torch.is_tensor(t) and t.is_floating_point() else t  # noqa: E731
        return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}

    # -- prefetch ----------------------------------------------------------------------------
    @torch.no_grad()
    def _gather(self, u: Unit, prefetched: bool = False) -> None:
        if u.pending is not None:                       # started earlier by a prefetch
            with trace.span("wait", unit=u.name):
                self._wait(u)
            return
        if not prefetched or u.gathered:
            return super()._gather(u)
        with trace.span("prefetch", unit=u.name):
            handles = []
            for g in u.groups:
                g.full.untyped_storage().resize_(g.nbytes)
                version = g.full._version
                with _preserve(g.full):
                    h = F.all_gather(g.full, g.shard.detach().to(g.full.dtype), self.group, async_op=True)
                handles.append((h, version))
            u.gathered, u.pending = True, handles

    def _wait(self, u: Unit) -> None:
        for g, (h, version) in zip(u.groups, u.pending):
            h.wait()        # gloo's worker thread copied into the buffer: reset its version
            torch._C._autograd._unsafe_set_version_counter((g.full,), (version,))
        u.pending = None

    def _free(self, u: Unit) -> None:
        if u.gathered and u.pending is not None:
            self._wait(u)
        super()._free(u)

    def _neighbour(self, u: Unit, step: int):
        if u not in self.order:
            return None
        i = self.order.index(u) + step
        return self.order[i] if 0 <= i < len(self.order) else None

    def _pre_forward(self, u: Unit) -> None:
        if u not in self.order:
            self.order.append(u)
        self._gather(u)
        nxt = self._neighbour(u, 1) if self.prefetch else None
        if nxt is not None and not nxt.gathered:
            self._gather(nxt, prefetched=True)
        self._t[u.name] = trace.stamp()

    def _pre_backward(self, u: Unit) -> None:
        super()._pre_backward(u)
        prev = self._neighbour(u, -1) if self.prefetch else None
        if prev is not None and not prev.gathered:
            self._gather(prev, prefetched=True)

    # -- the rest ----------------------------------------------------------------------------
    @torch.no_grad()
    def full_parameters(self) -> dict:
        """{name: full parameter} gathered from the shards (a collective: every rank calls it),
        in the shards' dtype (fp32 for a policy's 'sharded' layout)."""
        out = {}
        for g in self.groups():
            full = g.shard.new_empty(g.layout.size)
            F.all_gather(full, g.shard.detach(), self.group)
            out.update({n: v.clone() for n, v in g.layout.views(full).items()})
        return out

    def padding(self) -> dict:
        """Padding elements this rank holds, by category (see `labkit.zero.accounting`)."""
        own = sum(g.layout.shard_padding for g in self.groups() if g.trainable)
        frozen = sum(g.layout.shard_padding for g in self.groups() if not g.trainable)
        return {"params": own + frozen, "grads": own, "optimizer": own}
