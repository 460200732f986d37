"""Peak memory over a training step, by category, activations included (layer 4).

On CPU the step runs under torch's `MemTracker` (torch.distributed._tools.mem_tracker), a
TorchDispatchMode that sees every storage created and freed and tags it as parameter,
buffer, gradient, activation (forward), temporary (backward) or optimizer state. On a GPU
the CUDA caching allocator's counters give the peak (`torch.cuda.max_memory_allocated`);
they know no categories, so model state comes from `measure` and the rest of the peak is
reported as activations + temporaries together (in `temporary`). The GPU path has not been
run on this course's CPU machines: it is untested here.
"""
from dataclasses import dataclass, replace

import torch

from labkit.memory.breakdown import OPTIMIZER, Breakdown
from labkit.memory.accounting import measure


@dataclass(frozen=True)
class Peak:
    """The peak of one training step on this rank."""
    at_peak: Breakdown        # bytes by category at the moment of the highest total
    forward: Breakdown        # by category at the highest point of forward (CPU tracker only)
    backward: Breakdown       # by category at the highest point of backward (CPU tracker only)
    before: int               # total held before the step started
    after: Breakdown          # `measure(model, optimizer)` after the step
    how: str                  # "MemTracker (CPU)" or "CUDA allocator"

    @property
    def total(self) -> int:
        return self.at_peak.total


def _from_tracker(snap: dict, after: Breakdown, label: str) -> Breakdown:
    """Map MemTracker's categories onto ours. Optimizer bytes beyond what persists after the
    step (foreach workspaces, the fp32 copies inside the update) count as temporary."""
    get = {str(k.value if hasattr(k, "value") else k): v for k, v in snap.items()}
    opt_seen = get.get("Optstate", 0)
    persistent = {c: getattr(after, c) for c in OPTIMIZER}
    left, opt = opt_seen, {}
    for c in OPTIMIZER:                       # fill master, m, v, other up to what persists
        opt[c] = min(left, persistent[c])
        left -= opt[c]
    return Breakdown(params=get.get("Parameter", 0), grads=get.get("Gradient", 0),
                     buffers=get.get("Buffer", 0),
                     activations=get.get("Activation", 0) + get.get("Other", 0),
                     temporary=get.get("Temp", 0) + left, label=label, **opt)


def _tracker():
    """torch's MemTracker, except that it does not hook frozen parameters (torch 2.13 tries to
    register a gradient hook on every parameter and fails on requires_grad=False)."""
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class Tracker(MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            out = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
            for p in module.parameters() if install_grad_hooks else ():
                if p.requires_grad and self._param_to_grad_hook_handles.get(p) is None:
                    def hook(g):
                        self._update_and_maybe_create_winfos(g, _MemRefType.GRAD)
                    self._param_to_grad_hook_handles[p] = (
                        p.register_hook(hook),
                        p.register_post_accumulate_grad_hook(lambda q: hook(q.grad)))
            return out
    return Tracker()


def peak(step, model: torch.nn.Module, optimizer=None, *inputs, label: str = "peak") -> Peak:
    """Run `step()` once (forward, backward, optimizer step) and return its peak by category.

    `inputs` (the batch) are tracked too and count as activations.
    """
    dev = next(model.parameters()).device
    if dev.type == "cuda":
        return _peak_cuda(step, model, optimizer, dev, label)
    from torch.distributed._tools.mem_tracker import _ModState
    mt = _tracker()
    mt.track_external(model, *([optimizer] if optimizer is not None else []), *inputs)
    before = measure(model, optimizer).total
    with mt:
        step()
    after = measure(model, optimizer)
    snaps = mt.get_tracker_snapshot("peak")
    snap = snaps.get(dev, next(iter(snaps.values()), {}))
    stats = mt.memory_tracking.get(model)

    def phase(state, name) -> Breakdown:
        snaps = [s.get(dev, {}) for s in (stats.snapshots.get(state, []) if stats else [])]
        top = max(snaps, key=lambda s: s.get("Total", 0), default={})
        return _from_tracker(top, after, f"{label} {name}")
    return Peak(at_peak=_from_tracker(snap, after, label),
                forward=phase(_ModState.PEAK_FW, "forward"),
                backward=phase(_ModState.PEAK_BW, "backward"), before=before, after=after,
                how="MemTracker (CPU)")


def _peak_cuda(step, model, optimizer, dev, label) -> Peak:
    """CUDA allocator statistics (untested on the course's CPU machines)."""
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    step()
    torch.cuda.synchronize(dev)
    top = torch.cuda.max_memory_allocated(dev)
    after = measure(model, optimizer)
    rest = max(0, top - after.total)          # activations + temporaries, not told apart
    at_peak = replace(after, temporary=rest, label=label)
    empty = Breakdown(label="not measured on GPU")
    return Peak(at_peak=at_peak, forward=empty, backward=empty, before=base, after=after,
                how="CUDA allocator")
