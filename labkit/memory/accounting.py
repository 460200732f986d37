"""Bytes actually held on this rank, by category (layer 4: measurement).

`measure(model, optimizer)` walks the model's parameters, buffers and gradients and the
optimizer's state and adds up the bytes of their storages:
- a storage is counted once, in the first category that reaches it (tied weights, views, a
  flat buffer that many parameters point into),
- a DTensor (FSDP2, tensor parallel, labkit's ZeRO) counts by its local shard on this rank:
  the bytes of the storage that shard lives in (`distribute_tensor` leaves a short last shard
  as a view into a buffer padded to the longest shard; that padding is held, so it counts),
- optimizer tensors are split by role: fp32 master copies (optimizer parameters that are not
  model parameters), m / momentum buffer, v, and the rest (Adam's `step` counters, ...).
These are the same categories as `model_states`, so formula and measurement subtract.
"""
import torch

from labkit.i18n import N_, tr
from labkit.memory.breakdown import Breakdown

# optimizer.state keys -> category (torch.optim, and bitsandbytes' 8-bit optimizers)
STATE_KEYS = {
    "exp_avg": N_("momentum"), "momentum_buffer": N_("momentum"), "state1": N_("momentum"),
    "exp_avg_sq": N_("variance"), "state2": N_("variance"),
}


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of `t` stored on this rank: a DTensor's local shard, else t itself."""
    to_local = getattr(t, "to_local", None)
    if to_local is not None and type(t).__name__ == "DTensor":
        return t._local_tensor if hasattr(t, "_local_tensor") else to_local()
    return t


class _Counter:
    """Adds storage bytes by category, each storage once."""

    def __init__(self):
        self.seen = set()
        self.bytes = {}
        self.devices = {}

    def add(self, category: str, t) -> None:
        if not isinstance(t, torch.Tensor):
            return
        t = local_tensor(t)
        if t.device.type == "meta":
            return
        st = t.untyped_storage()
        key = (str(t.device), st.data_ptr())
        if st.nbytes() == 0 or key in self.seen:
            return
        self.seen.add(key)
        self.bytes[category] = self.bytes.get(category, 0) + st.nbytes()
        self.devices.setdefault(category, set()).add(t.device.type)


def _unique_params(model: torch.nn.Module) -> list:
    return list({id(p): p for p in model.parameters()}.values())


@torch.no_grad()
def measure(model: torch.nn.Module, optimizer=None, label: str = "") -> Breakdown:
    """Exact bytes held by `model` (and `optimizer`) on this rank, by category.

    params     every parameter's storage (frozen ones too; tied weights once)
    grads      `.grad` of model parameters, and of master copies if they have one
    buffers    registered buffers
    master     optimizer parameters that are not model parameters (fp32 masters)
    momentum / variance / other   optimizer.state tensors by key (see STATE_KEYS)
    Categories held in CPU memory while the parameters are on an accelerator are listed in
    `on_host` (optimizer offload).
    """
    c = _Counter()
    params = _unique_params(model)
    for p in params:
        c.add("params", p)
    for b in model.buffers():
        c.add("buffers", b)
    for p in params:
        c.add("grads", p.grad)
    if optimizer is not None:
        model_ids = {id(p) for p in params}
        masters = [p for g in optimizer.param_groups for p in g["params"] if id(p) not in model_ids]
        for p in masters:
            c.add("master", p)
        for p in masters:
            c.add("grads", p.grad)
        for state in optimizer.state.values():
            for key, value in state.items():
                c.add(STATE_KEYS.get(key, "other"), value)
    for source in (model, optimizer):        # flat buffers a strategy keeps off .grad (labkit.zero)
        for category, t in getattr(source, "labkit_memory", tuple)():
            c.add(category, t)
    param_dev = {p.device.type for p in params}
    on_host = ()
    if param_dev and "cpu" not in param_dev:
        on_host = tuple(k for k, devs in c.devices.items() if devs == {"cpu"})
    return Breakdown(**c.bytes, on_host=on_host, label=label or "measured")


def count_params(model: torch.nn.Module, local: bool = False) -> int:
    """Distinct parameters (tied once); `local=True` counts only this rank's DTensor shards."""
    return sum((local_tensor(p) if local else p).numel() for p in _unique_params(model))


def gather(breakdown: Breakdown) -> list:
    """Inside a rank: every rank's Breakdown, by rank (its fields gathered as tensors over the
    group: no pickle of a peer's is ever loaded, comm/objects.py)."""
    import dataclasses
    from labkit.comm.objects import all_gather_json
    every = all_gather_json(dataclasses.asdict(breakdown))
    return [Breakdown(**{**d, "on_host": tuple(d["on_host"])}) for d in every]


def per_rank(cluster, fn, *args, **kwargs) -> list:
    """Run `fn` (returning a Breakdown) on every rank of `cluster`; Breakdowns labelled by rank."""
    results = cluster.run(fn, *args, **kwargs)
    for r, b in enumerate(results):
        if not isinstance(b, Breakdown):
            raise TypeError(f"rank {r} returned {type(b).__name__}, not a Breakdown: make the "
                            "function end with `return labkit.memory.measure(model, optimizer)`")
    return label_ranks(results)


def label_ranks(breakdowns: list) -> list:
    """The same Breakdowns, labelled 'rank 0', 'rank 1', ... in list order."""
    from dataclasses import replace
    return [replace(b, label=f"rank {r}" + (f" {b.label}" if b.label and b.label != "measured" else ""))
            for r, b in enumerate(breakdowns)]


def table(breakdowns: list, formula: Breakdown = None, unit: str = "B"):
    """One row per rank, one column per non-zero category; with `formula`, a 'formula' row
    and each rank's difference (measured - formula) in the last column. unit: 'B' or 'MB'.
    Returns a `labkit.tables.Table`: aligned text when printed, a table in a notebook."""
    from labkit.tables import Table
    div = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
    rows = list(breakdowns) + ([formula] if formula is not None else [])
    cats = [k for k in Breakdown.__dataclass_fields__
            if k in rows[0].as_dict() and any(getattr(b, k) for b in rows)]
    fmt = (lambda v: f"{v / div:,.0f}") if unit == "B" else (lambda v: f"{v / div:,.3f}")
    header = [""] + cats + ["total"] + ([N_("measured - formula")] if formula is not None else [])
    out = []
    for b in rows:
        name = tr("formula") if b is formula else (" ".join(b.label.split()[:2])
                                               if b.label.startswith("rank") else b.label[:10])
        line = [name] + [fmt(getattr(b, k)) for k in cats] + [fmt(b.total)]
        if formula is not None:
            line.append("" if b is formula else fmt(b.total - formula.total))
        out.append(line)
    return Table(header, out, align="l" + "r" * (len(header) - 1),
                 title=tr("bytes ({unit})", unit=unit) if unit != "B" else tr("bytes"))
