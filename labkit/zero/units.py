"""How stage 3 cuts a model into units, and one unit's parameters bound to a flat buffer (layer 3).

`default_units(model)` names the units; a `Group` is the trainable (or frozen) parameters of
one unit laid into a `Flat` (labkit/zero/flat.py): this rank's shard as an `nn.Parameter`, the
full buffer (its storage empty until gathered) and the views the layers now hold in place of
their parameters. A `Unit` is a name, a module and its groups (stage3_core.py's hooks use them).
"""
import torch
import torch.nn as nn

from labkit.zero import flat as F


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
        self.full = full32.to(dtype)
        self.shard = nn.Parameter(full32[self.layout.lo:self.layout.hi].to(shard_dtype or dtype).clone(),
                                  requires_grad=trainable)
        self.views = self.layout.views(self.full)
        for name, v in self.views.items():
            v.requires_grad_(trainable)
            for module, attr in refs[name]:                     # the layer now holds the view
                del module._parameters[attr]
                setattr(module, attr, v)
        self.nbytes = self.full.untyped_storage().nbytes()
        self.ready = 0
        self.full.untyped_storage().resize_(0)


class Unit:
    def __init__(self, name, module, groups):
        self.name, self.module, self.groups = name, module, groups
        self.gathered, self.pending, self.reduced = False, None, False
        for g in groups:
            g.unit = self
