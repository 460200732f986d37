"""A plan: the layout the planner chose (or None), the model and hardware, and the reason it gives
at each branch of the notes' decision tree, printed with its numbers (layer 1: pure arithmetic)."""
from dataclasses import dataclass, field

from labkit.i18n import tr
from labkit.memory import GB
from labkit.plan.shapes import Hardware, Model


@dataclass
class Plan:
    model: Model
    hardware: Hardware
    chosen: object                  # the planner's Candidate; None when nothing fits
    reasons: list = field(default_factory=list)    # [(branch of the tree, sentence)]

    # the chosen degree of each dimension (plan.tp, ...), None when nothing fits
    tp, pp, dp, cp, ep = (property(lambda self, d=d: getattr(self.chosen, d) if self.chosen else None)
                          for d in ("tp", "pp", "dp", "cp", "ep"))

    def __str__(self) -> str:
        hw = self.hardware
        m = self.model
        head = tr("{name} on {nodes} node(s) x {g} {gpu} ({gb:g} GB, {tflops:g} TFLOP/s); a step is "
                  "one global batch of {batch:,} sequences x {seq:,} tokens = {mtok:.1f}M tokens",
                  name=m.name, nodes=hw.nodes, g=hw.gpus_per_node, gpu=hw.gpu, gb=hw.gpu_gb,
                  tflops=hw.peak_tflops, batch=m.global_batch, seq=m.seq, mtok=m.tokens_per_step / 1e6)
        body = "\n".join("  " + tr("{branch}: {reason}", branch=k, reason=v) for k, v in self.reasons)
        if self.chosen is None:
            return f"{head}\n{body}\n  => " + tr("nothing fits")
        c = self.chosen
        traffic = (f"TP {c.traffic.tp / GB:.1f}, PP {c.traffic.pp / GB:.2f}, DP {c.traffic.dp / GB:.1f}"
                   + (f", CP {c.traffic.cp / GB:.1f}" if c.cp > 1 else "")
                   + (f", EP {c.traffic.ep / GB:.1f}" if c.ep > 1 else ""))
        tail = f"  => {c.short()}\n     " + tr(
            "memory/GPU: model state {state:.1f} + activations {act:.1f} + gathered layers {gathered:.1f} "
            "GB; traffic/GPU/step: {traffic} GB; bubble {bubble:.1%}", state=c.model_state / GB,
            act=c.activations / GB, gathered=c.working / GB, traffic=traffic, bubble=c.bubble)
        return f"{head}\n{body}\n{tail}"

    __repr__ = __str__
