"""ZeRO stage 3, the core: parameters sharded, gathered unit by unit (layer 3). `Stage3Core(model)`.

Units: each layer of a ModuleList/Sequential, each other child of the root with parameters; the
root keeps the rest. A unit's parameters are laid into flat buffers (`Flat`: trainable, frozen),
padded to a multiple of N; this rank keeps its shard as an `nn.Parameter` (parameters() are the
shards). The layers' attributes become views into a full buffer, empty except while the unit runs:

  forward pre-hook        gather: all-gather the unit's full parameters (storage resized, filled)
  forward hook            free them (storage resized to 0; the views stay, empty)
  full backward pre-hook  gather them again: backward needs them
  post-accumulate-grad    the unit's last gradient is in: flatten, reduce-scatter, add this
                          rank's averaged shard to `shard.grad`, free the full parameters
An end-of-backward callback reduces a unit still waiting (an unused parameter) and frees the
rest. stage3.py adds prefetch, mixed precision, tied weights and the events (labkit/trace.py).
"""
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn

from labkit import trace
from labkit.zero import flat as F
from labkit.zero.units import Group, Unit, default_units

warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
_preserve = torch.autograd._unsafe_preserve_version_counter   # views saved for backward stay valid


class Stage3Core(nn.Module):
    """The wrapped model: forward runs the original module with per-unit gather and free."""
    group_class = Group

    def __init__(self, module: nn.Module, group=None, units=None):
        super().__init__()
        self.module, self.group = module, group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        if not hasattr(self, "dtype"):           # fp32 everywhere (stage3.py: mixed precision)
            self.dtype = self.shard_dtype = self.reduce_dtype = torch.float32
        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src, group=group)
        units = [("", module)] + list(units if units is not None else default_units(module))
        self.units = self._build(units)
        self.shards = nn.ParameterList([g.shard for u in self.units for g in u.groups])
        self.backward_seen, self._callback_queued, self._t = False, False, {}
        for u in self.units:
            u.module.register_forward_pre_hook(lambda m, a, u=u: self._pre_forward(u))
            u.module.register_forward_hook(lambda m, a, o, u=u: self._post_forward(u))
            u.module.register_full_backward_pre_hook(lambda m, g, u=u: self._pre_backward(u))

    def _unit(self, name, module, named, refs) -> Unit:
        """One unit from its [(name, parameter)]: a group of trainable, one of frozen ones."""
        groups = []
        for trainable in (True, False):
            mine = [(n, p) for n, p in named if p.requires_grad == trainable]
            if mine:
                g = self.group_class(mine, {n: refs[id(p)] for n, p in mine}, trainable, self.dtype,
                                     self.world, self.rank, self.shard_dtype)
                groups.append(g)
                for v in g.views.values():
                    if trainable:
                        v.register_post_accumulate_grad_hook(lambda _v, g=g: self._grad_ready(g))
        return Unit(name or "root", module, groups) if groups else None

    def _build(self, units) -> list:
        """Each parameter to the innermost unit holding it (no tied weights: see stage3.py)."""
        taken, out = set(), []
        for name, module in reversed(units):               # the layers first: the root keeps the rest
            named, refs = [], {}
            for mname, m in module.named_modules():
                for attr, p in m._parameters.items():
                    if p is not None and id(p) not in taken:
                        taken.add(id(p))
                        named.append((".".join(x for x in (name, mname, attr) if x), p))
                        refs[id(p)] = [(m, attr)]
            out.insert(0, self._unit(name, module, named, refs))
        return [u for u in out if u is not None]

    # -- the four hooks ----------------------------------------------------------------------
    @torch.no_grad()
    def _gather(self, u: Unit) -> None:
        if u.gathered:
            return
        with trace.span("all-gather", unit=u.name):
            for g in u.groups:
                g.full.untyped_storage().resize_(g.nbytes)
                with _preserve(g.full):
                    F.all_gather(g.full, g.shard.detach().to(g.full.dtype), self.group)
            u.gathered = True

    def _free(self, u: Unit) -> None:
        if not u.gathered:
            return
        with trace.span("free", unit=u.name):
            for g in u.groups:
                g.full.untyped_storage().resize_(0)
            u.gathered = False

    def _pre_forward(self, u: Unit) -> None:
        self._gather(u)
        self._t[u.name] = trace.stamp()

    def _post_forward(self, u: Unit) -> None:
        trace.add("compute", self._t.pop(u.name, None), unit=u.name)
        self._free(u)

    def _pre_backward(self, u: Unit) -> None:
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        self._gather(u)

    @torch.no_grad()
    def _grad_ready(self, g: Group) -> None:
        self.backward_seen = True
        g.ready += 1
        if g.ready == len(g.views):
            self._reduce(g)

    @torch.no_grad()
    def _reduce(self, g: Group) -> None:
        """Flatten the group's gradients, reduce-scatter, keep the averaged own shard."""
        with trace.span("reduce-scatter", unit=g.unit.name):
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

    def gathered_bytes(self) -> int:
        """Bytes of full parameters gathered at this moment on this rank."""
        return sum(g.full.untyped_storage().nbytes() for g in self.groups())
