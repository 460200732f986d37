"""The planner as a form (ipywidgets), and as HTML that renders without a browser too.

    labkit.plan.form()                      # pick a model and a cluster; the plan updates below
    HTML(render(MODELS["70B"], Hardware(nodes=4)))
"""
import html

from labkit.i18n import N_, tr
from labkit.memory import GB
from labkit.plan.flops import GPUS
from labkit.plan.shapes import MODELS, Hardware, Model
from labkit.plan.planner import plan


def render(model: Model, hw: Hardware) -> str:
    """The plan as two HTML tables: the tree's branches with reasons, then the chosen layout."""
    p = plan(model, hw)
    rows = "".join(f"<tr><td style='text-align:left'>{html.escape(k)}</td>"
                   f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in p.reasons)
    out = (tr("<b>{name}</b> on {nodes} x {g} {gpu}", name=html.escape(model.name), nodes=hw.nodes,
              g=hw.gpus_per_node, gpu=html.escape(hw.gpu))
           + f"<table><tr><th>{tr('branch')}</th><th>{tr('reason')}</th></tr>{rows}</table>")
    c = p.chosen
    if c is None:
        return out + tr("<p><b>Nothing fits</b> on this hardware: add GPUs or memory.</p>")
    cells = [("layout", f"TP {c.tp} x PP {c.pp} x DP {c.dp}"), ("sharding", tr(c.sharding)),
             ("checkpointing", tr(c.checkpointing)), (N_("micro-batch x count"), f"{c.micro_batch} x {c.micro_batches}"),
             (N_("memory / GPU"), tr("{gb:.1f} GB (state {state:.1f}, activations {act:.1f}, gathered "
                                 "{gathered:.1f}) of {cap:g}", gb=c.memory / GB, state=c.model_state / GB,
                                 act=c.activations / GB, gathered=c.working / GB, cap=hw.gpu_gb)),
             (N_("traffic / GPU / step"), f"TP {c.traffic.tp / GB:.1f} GB, PP {c.traffic.pp / GB:.2f} GB, "
                                      f"DP {c.traffic.dp / GB:.1f} GB"),
             ("bubble", f"{c.bubble:.1%}"),
             (N_("step time"), tr("{s:.2f} s per global batch of {batch:,} x {seq:,} tokens", s=c.step_seconds,
                              batch=p.model.global_batch, seq=p.model.seq)), ("MFU", f"{c.mfu:.0%}")]
    body = "".join(f"<tr><td style='text-align:left'>{tr(k)}</td><td style='text-align:left'>{html.escape(v)}</td></tr>"
                   for k, v in cells)
    return out + f"<table><tr><th>{tr('plan')}</th><th></th></tr>{body}</table>"


class _NoDisplay:
    def update(self, obj):
        self.last = obj


def form(model: str = "70B", gpu: str = "H100-80GB", gpus_per_node: int = 8, nodes: int = 4):
    """Widgets for the model and the cluster; the plan below them updates on every change
    (a display handle, so the first plan also shows in a static copy of the notebook)."""
    import ipywidgets as w
    from IPython.display import HTML, display
    m = MODELS[model]
    preset = w.Dropdown(options=list(MODELS), value=model, description=tr("model"))
    fields = {k: w.FloatText(value=getattr(m, k), description=k) for k in ("params",)}
    fields.update({k: w.IntText(value=getattr(m, k), description=k)
                   for k in ("layers", "hidden", "heads", "seq", "global_batch")})
    gpu_w = w.Dropdown(options=list(GPUS), value=gpu, description="GPU")
    per_node = w.IntText(value=gpus_per_node, description=tr("GPUs/node"))
    nodes_w = w.IntText(value=nodes, description=tr("nodes"))
    intra = w.FloatText(value=GPUS[gpu][2], description="NVLink GB/s")
    inter = w.FloatText(value=GPUS[gpu][3], description=tr("network GB/s"))
    handle = display(HTML(""), display_id=True) or _NoDisplay()   # None outside IPython

    def update(*_):
        try:
            mod = MODELS[preset.value].with_(**{k: (int(v.value) if k != "params" else v.value)
                                                for k, v in fields.items()})   # keeps experts, K/V heads
            hw = Hardware(gpu=gpu_w.value, gpus_per_node=per_node.value, nodes=nodes_w.value,
                          intra_gbps=intra.value, inter_gbps=inter.value)
            handle.update(HTML(render(mod, hw)))
        except ValueError as exc:
            handle.update(HTML(tr("<p><b>Cannot plan:</b> {error}</p>", error=html.escape(str(exc)))))

    def load_preset(change):
        for k, v in fields.items():
            v.value = getattr(MODELS[change["new"]], k)

    def load_gpu(change):
        intra.value, inter.value = GPUS[change["new"]][2], GPUS[change["new"]][3]

    preset.observe(load_preset, names="value")
    gpu_w.observe(load_gpu, names="value")
    for x in (*fields.values(), gpu_w, per_node, nodes_w, intra, inter):
        x.observe(update, names="value")
    box = w.VBox([w.HBox([preset, gpu_w]), w.HBox(list(fields.values())[:3]),
                  w.HBox(list(fields.values())[3:]), w.HBox([per_node, nodes_w]), w.HBox([intra, inter])])
    update()
    return box
