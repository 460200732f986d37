"""Memory per rank and per phase of a training step, live in the notebook (layer 4).

On each rank (inside cluster.run):
    meter = live.Meter(model, optimizer)          # model/optimizer of any strategy
    with meter.forward():                         # counts the activations saved for backward
        loss = loss_fn(model(x), y)
    meter.emit("after forward", step)             # (call meter.probe_backward(step) BEFORE the
    loss.backward(); optimizer.step()             #  forward: module backward hooks attach there)
    meter.emit("after step", step)
In the notebook:
    with live.Display(cluster) as d:              # redraws as events arrive; PNG at the end
        cluster.run(train)

Categories (bytes, storages counted once, as in `measure`): params, grads, master, moments
(m and v), gathered (full parameters a sharded strategy holds at the moment: it exposes
`gathered_bytes()`), activations (tensors autograd saved for backward and still holds,
excluding parameters; tracked with saved_tensors_hooks and weak references).
"""
import weakref

from labkit.livefig import LiveFigure
from labkit.figtext import figsize as _figsize, size as _fs
from labkit.i18n import N_, tr_fig  # figure text in the learner's language

CATEGORIES = (N_("params"), N_("grads"), N_("master"), N_("moments"), N_("gathered"), N_("activations"))
COLORS = {"params": "#4c72b0", "grads": "#dd8452", "master": "#55a868", "moments": "#c44e52",
          "gathered": "#8172b3", "activations": "#937860"}


class Meter:
    """Rank side: bytes by category now, sent with labkit.emit."""

    def __init__(self, model, optimizer=None, probe=None, gathered_storages=None):
        """gathered_storages: a function giving the storages of the full parameters a sharded
        strategy holds (counted as `gathered`, never as activations); default: a labkit ZeRO-3
        model's full buffers, if the model has them."""
        self.model, self.optimizer = model, optimizer
        self.saved = []                       # (weakref to a saved tensor, storage key, bytes)
        self.probe = probe
        self.gathered_storages = gathered_storages

    def forward(self):
        import torch
        params = {getattr(p, "_local_tensor", p).untyped_storage().data_ptr() for p in self.model.parameters()}  # DTensor: its shard

        def pack(t):
            st = t.untyped_storage()
            if st.data_ptr() not in params and not (t.is_leaf and t.requires_grad):
                try:
                    self.saved.append((weakref.ref(t), st.data_ptr(), st.nbytes()))
                except TypeError:
                    pass
            return t
        self.saved = []
        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

    def activations(self) -> int:
        """Bytes of the tensors autograd saved and still holds, each storage once. Each saved
        tensor is looked up now: its storage's address and size now, not when it was saved. A
        sharded strategy frees the full weights a layer saved views of (resized to 0) and the
        allocator reuses the address; keyed and sized at save time, the count kept a stale size,
        or dropped a tensor that came to share the address, and moved between runs and ranks in
        steps of those weights' sizes (128 KiB for TinyGPT's tied embedding)."""
        if self.gathered_storages is not None:
            storages = self.gathered_storages()
        else:
            storages = [g.full.untyped_storage() for g in getattr(self.model, "groups", lambda: [])()]
        gathered = {st.data_ptr() for st in storages if st.nbytes()}
        seen, total = set(), 0
        for ref, _, _ in self.saved:
            t = ref()
            if t is None:
                continue
            st = t.untyped_storage()
            key = st.data_ptr()
            if st.nbytes() == 0 or key in gathered or key in seen:
                continue
            seen.add(key)
            total += st.nbytes()
        return total

    def snapshot(self) -> dict:
        from labkit.memory.accounting import measure
        b = measure(self.model, self.optimizer)
        gathered = getattr(self.model, "gathered_bytes", lambda: 0)()
        return {"params": b.params, "grads": b.grads, "master": b.master,
                "moments": b.momentum + b.variance, "gathered": gathered,
                "activations": self.activations()}

    def emit(self, phase: str, step: int) -> dict:
        import labkit
        snap = self.snapshot()
        labkit.emit(memory=snap, phase=phase, step=step)
        return snap

    def train(self, batches, loss_fn, probe=None) -> dict:
        """The loop the live figure watches: for each (x, y) in `batches` one step, emitting
        'after forward' (activations tracked), 'during backward' (when backward reaches `probe`,
        default the middle layer) and 'after step'. Returns the last snapshot."""
        model, opt = self.model, self.optimizer
        for step, (x, y) in enumerate(batches):
            self.probe_backward(step, module=probe)
            with self.forward():
                loss = loss_fn(model(x), y)
            self.emit("after forward", step)
            loss.backward()
            opt.step()
            self.emit("after step", step)
            opt.zero_grad()
            del loss
        return self.snapshot()

    def probe_backward(self, step: int, module=None):
        """Emit 'during backward' once, when backward reaches `module` (default: the middle
        layer). Call it before the forward: full backward hooks attach during forward."""
        m = module or self._middle()
        fired = []

        def hook(mod, grad_out):
            if not fired:
                fired.append(1)
                self.emit("during backward", step)
                handle.remove()
        handle = m.register_full_backward_pre_hook(hook)
        return handle

    def _middle(self):
        units = getattr(self.model, "units", None)       # a sharded model's layers
        if units:
            return units[len(units) // 2].module
        root = getattr(self.model, "module", self.model)
        mods = [m for _, m in root.named_modules() if m is not root
                and next(m.parameters(recurse=False), None) is not None]
        return mods[len(mods) // 2] if mods else root


class Display(LiveFigure):
    """Notebook side: stacked bars by category, one panel per rank, one bar per (step, phase),
    redrawn while the run goes on (labkit.livefig.LiveFigure); the final figure stays as a PNG."""

    def __init__(self, cluster, title: str = N_("memory per rank, live (labkit.emit)"), fps: float = 3.0,
                 unit: float = 1e6, unit_name: str = "MB"):
        super().__init__(cluster, fps)
        self.title, self.unit, self.unit_name = title, unit, unit_name
        self.bars = {}                       # rank -> [(label, {category: bytes})]

    def _take(self, event) -> bool:
        d = event.data
        if "memory" not in d:
            return False
        self.bars.setdefault(event.rank, []).append(
            (f"{d.get('step', '')}:{d.get('phase', '')}", d["memory"]))
        return True

    def figure(self):
        return figure(self.bars, self.title, self.unit, self.unit_name)


def figure(bars: dict, title: str = "", unit: float = 1e6, unit_name: str = "MB"):
    """Stacked bars: {rank: [(label "step:phase", {category: bytes})]} -> a figure."""
    import matplotlib.pyplot as plt
    ranks = sorted(bars) or [0]
    fig, axes = plt.subplots(1, len(ranks), figsize=_figsize((min(14, 2.6 + 2.9 * len(ranks)), 3.4)),
                             sharey=True, squeeze=False)
    for ax, r in zip(axes[0], ranks):
        rows = bars.get(r, [])
        bottom = [0.0] * len(rows)
        for c in CATEGORIES:
            vals = [snap.get(c, 0) / unit for _, snap in rows]
            if any(vals):
                ax.bar(range(len(rows)), vals, bottom=bottom, color=COLORS[c], label=tr_fig(c), width=0.8)
                bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([_short(lbl) for lbl, _ in rows], rotation=90, fontsize=_fs(7))
        ax.set_title(f"rank {r}", fontsize=_fs(9))
    axes[0][0].set_ylabel(unit_name)
    handles, labels = [], []
    for ax in axes[0]:
        for h, lb in zip(*ax.get_legend_handles_labels()):
            if lb not in labels:
                handles.append(h)
                labels.append(lb)
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize=_fs(7), ncol=1)
    fig.suptitle(tr_fig(title), fontsize=_fs(10))
    fig.tight_layout(rect=(0, 0, 0.88 if _fs(7) == 7 else 0.8, 1))   # room for the legend
    return fig


def _short(label: str) -> str:
    step, _, phase = label.partition(":")
    phase = {"after forward": N_("fwd"), "during backward": N_("bwd"), "after step": N_("step")}.get(phase, phase)
    return f"s{step} {tr_fig(phase)}"
