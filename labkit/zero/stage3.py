"""ZeRO stage 3: the parameters themselves are sharded, gathered layer by layer (layer 3).

    model = Stage3(model, group=None, mixed_precision=False)     # or labkit.zero.wrap(..., stage=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)          # parameters() are this rank's shards

The model is cut into units: each layer of a ModuleList/Sequential and each other child of
the root that holds parameters; the root unit keeps the rest, and any parameter used by two
units (a tied weight). Each unit's parameters are laid into flat buffers (`Flat`: one for
the trainable ones, one for the frozen ones), padded to a multiple of N; this rank keeps only
its shard, as an `nn.Parameter` registered on the wrapper, so `parameters()` are the shards
(like FSDP2). The layers' own attributes become views into a full buffer whose storage is
empty except while the unit runs (module hooks):

  forward pre-hook        all-gather the unit's full parameters (storage resized, filled)
  forward hook            free them (storage resized to 0; the views stay, empty)
  full backward pre-hook  all-gather them again: backward needs them
  post-accumulate-grad    when the unit's last gradient is in: flatten the gradients,
                          reduce-scatter, add this rank's averaged shard to `shard.grad`,
                          free the full parameters and gradients
Frozen parameters are gathered (forward needs them) but never reduced. An end-of-backward
callback reduces any unit left waiting for an unused parameter's gradient and frees what is
still gathered. With `prefetch=True` the next unit's all-gather starts (async) when a unit
starts; on CPU that saves no time: `events` shows the order of the calls.
"""
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn

from labkit.zero import flat as F
from labkit.zero.optim import HALF

warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
_preserve = torch.autograd._unsafe_preserve_version_counter   # views saved for backward stay valid


def default_units(model: nn.Module) -> list:
    """[(name, module)]: the layers of ModuleLists/Sequentials, other children with parameters."""
    units = []
    for name, child in model.named_children():
        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            units += [(f"{name}.{n}", c) for n, c in child.named_children()]
        elif next(child.parameters(), None) is not None:
            units.append((name, child))
    return units


class Group:
    """The trainable (or frozen) parameters of one unit: layout, shard, full buffer, views."""

    def __init__(self, named, refs, trainable, dtype, world, rank, shard_dtype=None):
        self.layout = F.Flat(named, world, rank)
        self.trainable = trainable
        full32 = self.layout.flatten({n: p.detach() for n, p in named}, dtype=torch.float32)
        self.master_init = full32[self.layout.lo:self.layout.hi].clone()
        self.full = full32.to(dtype)
        self.shard = nn.Parameter(full32[self.layout.lo:self.layout.hi].to(shard_dtype or dtype).clone(),
                                  requires_grad=trainable)
        self.views = self.layout.views(self.full)
        for name, v in self.views.items():
            v.requires_grad_(trainable)
            for module, attr in refs[name]:                     # tied: every reference
                del module._parameters[attr]
                setattr(module, attr, v)
        self.nbytes = self.full.untyped_storage().nbytes()
        self.ready = 0
        self.full.untyped_storage().resize_(0)


class Unit:
    def __init__(self, name, module, groups):
        self.name, self.module, self.groups = name, module, groups
        self.gathered, self.pending, self.reduced = False, None, False


class Stage3(nn.Module):
    """The wrapped model: forward runs the original module with per-unit gather and free."""

    def __init__(self, module: nn.Module, group=None, mixed_precision: bool = False,
                 units=None, prefetch: bool = False, reduce_dtype=None, policy=None):
        super().__init__()
        if policy is not None and (mixed_precision or reduce_dtype is not None):
            raise ValueError("give either policy (labkit.zero.policy.Policy) or mixed_precision/reduce_dtype, not both")
        self.module, self.group, self.prefetch, self.policy = module, group, prefetch, policy
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        if policy is not None:       # dtype: what is gathered and computed in; shard_dtype: parameters()
            self.mixed = policy.layout == "masters"
            self.dtype, self.shard_dtype, self.reduce_dtype = policy.param_dtype, policy.shard_dtype, policy.reduce
            module.register_forward_pre_hook(self._cast_inputs, with_kwargs=True)
        else:
            self.mixed = mixed_precision
            self.dtype = self.shard_dtype = HALF if mixed_precision else torch.float32
            self.reduce_dtype = reduce_dtype or self.dtype
        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src, group=group)
        units = [("", module)] + list(units if units is not None else default_units(module))
        self.units = self._build(units)
        self.shards = nn.ParameterList([g.shard for u in self.units for g in u.groups])
        self.order, self.events, self.recording = [], [], False
        self.backward_seen, self._callback_queued, self._t = False, False, {}
        for u in self.units:
            u.module.register_forward_pre_hook(lambda m, a, u=u: self._pre_forward(u))
            u.module.register_forward_hook(lambda m, a, o, u=u: self._post_forward(u))
            u.module.register_full_backward_pre_hook(lambda m, g, u=u: self._pre_backward(u))

    def _build(self, units) -> list:
        names = [n for n, _ in units]
        unit_of = {}                          # module name -> unit index (nearest enclosing unit)
        for mname, _ in self.module.named_modules(remove_duplicate=False):
            best = max((i for i, n in enumerate(names)
                        if n == "" or mname == n or mname.startswith(n + ".")),
                       key=lambda i: len(names[i]))
            unit_of[mname] = best
        refs, where, params = {}, {}, {}
        for mname, m in self.module.named_modules(remove_duplicate=False):
            for attr, p in m._parameters.items():
                if p is None:
                    continue
                params.setdefault(id(p), (f"{mname}.{attr}".lstrip("."), p))
                refs.setdefault(id(p), []).append((m, attr))
                where.setdefault(id(p), set()).add(unit_of[mname])
        assign = {k: (next(iter(w)) if len(w) == 1 else 0) for k, w in where.items()}
        out = []
        for i, (name, module) in enumerate(units):
            mine = [params[k] for k in params if assign[k] == i]
            groups = []
            for trainable in (True, False):
                named = [(n, p) for n, p in mine if p.requires_grad == trainable]
                if named:
                    g = Group(named, {n: refs[id(p)] for n, p in named}, trainable, self.dtype,
                              self.world, self.rank, self.shard_dtype)
                    groups.append(g)
                    for n, v in g.views.items():
                        if trainable:
                            v.register_post_accumulate_grad_hook(lambda _v, g=g: self._grad_ready(g))
            if groups:
                out.append(Unit(name or "root", module, groups))
        for g in (g for u in out for g in u.groups):
            g.unit = next(u for u in out if g in u.groups)
        return out

    # -- the hooks ---------------------------------------------------------------------------
    def _cast_inputs(self, module, args, kwargs):
        """A policy's forward takes its floating inputs in param_dtype (FSDP2's cast_forward_inputs)."""
        cast = lambda t: t.to(self.dtype) if torch.is_tensor(t) and t.is_floating_point() else t  # noqa: E731
        return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}

    def _note(self, unit, kind, t0) -> None:
        if self.recording:
            self.events.append(dict(unit=unit.name, kind=kind, t0=t0, t1=time.perf_counter(),
                                    phase="backward" if self._callback_queued else "forward",
                                    gathered=self.gathered_bytes()))

    @torch.no_grad()
    def _gather(self, u: Unit, prefetched: bool = False) -> None:
        if u.pending is not None:                       # started earlier by a prefetch
            t0 = time.perf_counter()
            self._wait(u)
            self._note(u, "wait", t0)
            return
        if u.gathered:
            return
        t0 = time.perf_counter()
        handles = []
        for g in u.groups:
            g.full.untyped_storage().resize_(g.nbytes)
            version = g.full._version
            with _preserve(g.full):
                h = F.all_gather(g.full, g.shard.detach().to(g.full.dtype), self.group, async_op=prefetched)
            handles.append((h, version))
        u.gathered = True
        if prefetched:
            u.pending = handles
        self._note(u, "prefetch" if prefetched else "all-gather", t0)

    def _wait(self, u: Unit) -> None:
        for g, (h, version) in zip(u.groups, u.pending):
            h.wait()        # gloo's worker thread copied into the buffer: reset its version
            torch._C._autograd._unsafe_set_version_counter((g.full,), (version,))
        u.pending = None

    def _free(self, u: Unit) -> None:
        if not u.gathered:
            return
        t0 = time.perf_counter()
        if u.pending is not None:
            self._wait(u)
        for g in u.groups:
            g.full.untyped_storage().resize_(0)
        u.gathered = False
        self._note(u, "free", t0)

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
        self._t[u.name] = time.perf_counter()

    def _post_forward(self, u: Unit) -> None:
        self._note(u, "compute", self._t.pop(u.name, time.perf_counter()))
        self._free(u)

    def _pre_backward(self, u: Unit) -> None:
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        self._gather(u)
        prev = self._neighbour(u, -1) if self.prefetch else None
        if prev is not None and not prev.gathered:
            self._gather(prev, prefetched=True)

    @torch.no_grad()
    def _grad_ready(self, g: Group) -> None:
        self.backward_seen = True
        g.ready += 1
        if g.ready == len(g.views):
            self._reduce(g)

    @torch.no_grad()
    def _reduce(self, g: Group) -> None:
        """Flatten the group's gradients, reduce-scatter, keep the averaged own shard."""
        t0 = time.perf_counter()
        flat = g.shard.new_zeros(g.layout.size, dtype=self.reduce_dtype)
        for name, off, n, _ in g.layout.entries:
            v = g.views[name]
            if v.grad is not None:
                flat[off:off + n].copy_(v.grad.reshape(-1))
                v.grad = None
        shard = F.reduce_scatter(flat, self.group).div_(self.world).to(g.shard.dtype)
        if g.shard.grad is None:
            g.shard.grad = shard.clone()            # not a view: the full buffer goes now
        else:
            g.shard.grad.add_(shard)
        g.ready, g.reduced = 0, True
        self._note(g.unit, "reduce-scatter", t0)
        if all(x.reduced for x in g.unit.groups if x.trainable):
            self._free(g.unit)

    def _finish_backward(self) -> None:
        for u in self.units:
            for g in u.groups:
                if g.trainable and g.ready and not g.reduced:
                    self._reduce(g)                     # some parameter got no gradient
                g.reduced = False
            self._free(u)
        self._callback_queued = False

    # -- the rest ----------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def groups(self) -> list:
        return [g for u in self.units for g in u.groups]

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

    def gathered_bytes(self) -> int:
        """Bytes of full parameters gathered at this moment on this rank."""
        return sum(g.full.untyped_storage().nbytes() for g in self.groups())

    def padding(self) -> dict:
        """Padding elements this rank holds, by category (see `labkit.zero.accounting`)."""
        own = sum(g.layout.shard_padding for g in self.groups() if g.trainable)
        frozen = sum(g.layout.shard_padding for g in self.groups() if not g.trainable)
        return {"params": own + frozen, "grads": own, "optimizer": own}
