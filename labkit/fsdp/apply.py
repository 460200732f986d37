"""Apply PyTorch's FSDP2 (`fully_shard`) to a model written for one device (layer 3).

    model = labkit.fsdp.shard(model, wrap="block", strategy="full")    # inside a rank
    log = labkit.fsdp.comm_log(model)      # every all-gather / reduce-scatter of the steps since

`wrap` sets the granularity (the notes' auto-wrap policy): "model" (one unit: the whole model is
gathered at once, the highest peak), "block" (one unit per transformer block, the notes'
advice), "linear" (one unit per nn.Linear: the lowest peak and the most, smallest calls).
`strategy` is one of labkit.fsdp.strategies.STRATEGIES: "full", "grad_op", "no_shard",
"hybrid" (a (replicas, shard) 2-D mesh; `replicas` ranks hold the same shard).

With log=True every unit's all-gathers and reduce-scatters go through labkit's
collectives (labkit/fsdp/collectives.py, installed by `FSDPModule.set_custom_all_gather` /
`set_custom_reduce_scatter`, torch >= 2.8): each call is a span of a labkit.trace recorder, the
model's comm log; with ring=True the reduce-scatter is labkit's ring (module 02), so the bytes on
gloo are the (N-1)/N that NCCL would send instead of gloo's all-reduce-sized 2(N-1)/N.
"""
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from labkit.fsdp.strategies import WRAPS, Group, _strategy, padded_numel
from labkit.i18n import tr


def units(model: nn.Module, wrap: str) -> list:
    """The submodules that get their own fully_shard call, bottom-up, root excluded."""
    if wrap not in WRAPS:
        raise ValueError(tr("wrap must be one of {wraps}, got {wrap!r}", wraps=WRAPS, wrap=wrap))
    if wrap == "model":
        return []
    if wrap == "block":
        lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
        if not lists:
            raise ValueError(tr("wrap='block' looks for the model's nn.ModuleList of blocks; "
                                "{kind} has none: use wrap='linear' or 'model'",
                                kind=type(model).__name__))
        return [b for ml in lists for b in ml]
    owners = {}                    # parameter -> modules that hold it (tied weights)
    for m in model.modules():
        for p in m.parameters(recurse=False):
            owners.setdefault(id(p), []).append(m)
    # a Linear whose weight is tied to another module stays with the root (FSDP2 keeps tied
    # parameters in one unit)
    return [m for m in model.modules() if isinstance(m, nn.Linear)
            and all(len(owners[id(p)]) == 1 for p in m.parameters(recurse=False))]


def groups(model: nn.Module, wrap: str, strategy: str, shard: int, *, param_bytes: int = None,
           grad_bytes: int = None) -> list:
    """The FSDP units as labkit.fsdp.strategies.Group, computed from the unwrapped model: the
    same partition fully_shard makes (each unit takes its parameters not taken by a unit below
    it; the root takes the rest), padded as FSDP2 pads. Element sizes default to the
    parameters' own (pass 2 for bf16 parameters or reductions)."""
    s = _strategy(strategy)
    taken, out = set(), []
    for name, m in [(n, m) for n, m in model.named_modules() if any(m is u for u in units(model, wrap))] + [("", model)]:
        params = [p for p in m.parameters() if id(p) not in taken]
        taken.update(id(p) for p in params)
        pb = sum(padded_numel(tuple(p.shape), shard) * (param_bytes or p.element_size()) for p in params)
        gb = sum(padded_numel(tuple(p.shape), shard) * (grad_bytes or p.element_size())
                 for p in params if p.requires_grad)
        rsf = s.reshard_after_forward and name != ""   # FSDP2 keeps the root unsharded after forward
        out.append(Group(pb, gb, rsf, name or "(root)"))
    return out


def shard(model: nn.Module, *, wrap: str = "block", strategy: str = "full", replicas: int = 2,
          mp_policy=None, offload: bool = False, ring: bool = False, log: bool = True) -> nn.Module:
    """fully_shard `model` (in place) on this rank's process group; returns it.
    mp_policy: torch.distributed.fsdp.MixedPrecisionPolicy or None. offload: CPUOffloadPolicy
    (on a CPU-only machine nothing leaves a device: the bytes it would move are accounting)."""
    s = _strategy(strategy)
    n = dist.get_world_size()
    kind = "cuda" if torch.cuda.is_available() and dist.get_backend() == "nccl" else "cpu"
    if s.name == "hybrid":
        if n % replicas or replicas in (1, n):
            raise ValueError(tr("strategy='hybrid' needs 1 < replicas < world size and replicas "
                                "dividing it: world_size={n}, replicas={replicas}", n=n,
                                replicas=replicas))
        mesh = init_device_mesh(kind, (replicas, n // replicas), mesh_dim_names=("replicate", "shard"))
    elif s.name == "no_shard":
        mesh = init_device_mesh(kind, (n, 1), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(kind, (n,), mesh_dim_names=("shard",))
    kw = {"mesh": mesh}
    if mp_policy is not None:
        kw["mp_policy"] = mp_policy
    if offload:
        from torch.distributed.fsdp import CPUOffloadPolicy
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
    if wrap == "linear":   # a wrapped Linear on 3-D input returns a view; nothing here edits it in place
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    for m in units(model, wrap):
        fully_shard(m, reshard_after_forward=s.reshard_after_forward, **kw)
    fully_shard(model, **kw)
    if log:
        from labkit.fsdp.collectives import install
        model._labkit_comm_log = install(model, ring)
    return model


def comm_log(model: nn.Module, clear: bool = False) -> list:
    """The collectives FSDP made since shard() (or the last clear): dicts with kind, bytes (the
    full tensor), ranks, unit (the module's name), t0, t1 (time.perf_counter on this rank)."""
    log = getattr(model, "_labkit_comm_log", None)
    if log is None:
        raise ValueError("this model was not sharded by labkit.fsdp.shard(..., log=True)")
    out = list(log.records)
    if clear:
        log.records.clear()
    return out


def counts(records) -> dict:
    out = {"all_gather": 0, "reduce_scatter": 0}
    for r in records:
        out[r["kind"]] += 1
    return out
