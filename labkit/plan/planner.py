"""The notes' decision tree, walked with numbers (layer 1: pure arithmetic).

    p = plan(MODELS["70B"], Hardware(nodes=4))
    print(p)            # TP / PP / DP, ZeRO stage, checkpointing, each with its reason and numbers

Every layout the hardware allows (TP a divisor of the node that divides the heads, PP a
divisor of the layers, DP the rest; ZeRO 0-3 or hybrid sharding; checkpointing none /
selective / full; micro-batch 1..32) is costed: memory per GPU from `labkit.memory`, traffic
from `labkit.plan.traffic`, the bubble, and a step time. The plan is the fastest that fits;
the reasons walk the notes' tree (one GPU? DP / ZeRO / FSDP? checkpointing, 8-bit optimizer?
TP inside the node? PP? hybrid sharding over a slow network?) and give, at each branch, the
best layout of that branch with its numbers. Where the notes' tree is loose it follows practice:
- "fits: no parallelism" vs "DP first for throughput": with more than one GPU a model that fits
  is replicated (DP): the GPUs would otherwise sit idle.
- TP is chosen for memory, or to cut the data-parallel traffic that crosses the slow network
  (TP's own traffic stays on NVLink), not because it is fast in itself.
Step time model (stated assumptions): matmuls run at `efficiency` of peak; TP and PP traffic is
not overlapped; DP traffic overlaps with backward (2/3 of compute; ZeRO-3 prefetches, so all of
it); a pipeline's time is stretched by 1 / (1 - bubble). 10 % of GPU memory is kept free
(allocator fragmentation, communication buffers, CUDA context).
Two more dimensions, each costed like the others and chosen only when it wins:
- CP (context parallelism) for long sequences: tried when every rank keeps at least
  CP_MIN_TOKENS (8192) tokens, the length Llama 3 trained at without CP (arXiv 2407.21783,
  section 3.3.2, table 4). Activations are those of a sequence S / CP; the K/V exchange is
  all-gather attention's (Llama 3's choice, `labkit.cp.formulas`), not overlapped.
- EP (expert parallelism) for MoE models: EP divides the experts and CP x DP (it re-cuts the
  data-parallel ranks, `labkit.nd.layout`); expert weights are 1 / (TP PP EP) per GPU and
  their ZeRO shards span the EDP = CP x DP / EP replicas; the all-to-alls
  (`labkit.moe.formulas`, balanced routing) are not overlapped. FLOPs use the active parameters.
  MoE activations are costed as a dense layer's (Korthikanti's 4h FFN): for Mixtral's top-2 of
  FFN 14336 that undercounts the FFN part by 1.75x.
"""
from dataclasses import dataclass, field

from labkit.i18n import tr
from labkit.memory import GB, activations, model_states
from labkit.nd.layout import Layout
from labkit.plan.flops import bubble_ratio, flops_per_token
from labkit.plan.shapes import Hardware, Model
from labkit.plan.dims import CP_MIN_TOKENS, cp_choices, cp_ep_reasons, ep_choices  # noqa: F401
from labkit.plan.traffic import DIMS, Traffic, step_traffic

USABLE = 0.9              # fraction of GPU memory a plan may fill
EFFICIENCY = 0.5          # fraction of peak the matmuls reach (well-tuned bf16 kernels)


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    dp: int
    zero_stage: int
    hybrid: bool
    checkpointing: str
    optimizer: str
    micro_batch: int
    micro_batches: int
    model_state: float          # bytes per GPU
    activations: float          # bytes per GPU (peak)
    working: float              # bytes per GPU: ZeRO-3's gathered layers
    capacity: float
    traffic: Traffic
    comm_seconds: dict          # dim -> seconds on the wire per step
    compute_seconds: float
    bubble: float
    step_seconds: float
    mfu: float
    cp: int = 1
    ep: int = 1

    @property
    def memory(self) -> float:
        return self.model_state + self.activations + self.working

    @property
    def fits(self) -> bool:
        return self.memory <= self.capacity * USABLE

    @property
    def sharding(self) -> str:
        if self.hybrid:
            return "hybrid sharding (ZeRO-3 in the node, replicas across nodes)"
        return {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 / FSDP"}[self.zero_stage] if self.dp > 1 \
            else "none"

    def short(self) -> str:
        layout = (f"TP {self.tp}{' x CP ' + str(self.cp) if self.cp > 1 else ''} x PP {self.pp} x DP {self.dp}"
                  f"{' (EP ' + str(self.ep) + ')' if self.ep > 1 else ''}")
        return tr("{layout} ({sharding}), checkpointing {ck}, micro-batch {mb}: {gb:.1f} GB/GPU, "
                  "step {s:.2f} s, MFU {mfu:.0%}", layout=layout, sharding=tr(self.sharding),
                  ck=tr(self.checkpointing), mb=self.micro_batch, gb=self.memory / GB,
                  s=self.step_seconds, mfu=self.mfu)


def dp_exposed(comm_dp: float, compute: float, zero_stage: int) -> float:
    """Seconds of data-parallel traffic left after overlapping it with compute: ZeRO-3's
    prefetched gathers hide behind the whole step, DDP's buckets behind backward (2/3 of it)."""
    return max(0.0, comm_dp - (1.0 if zero_stage == 3 else 2 / 3) * compute)


def evaluate(model: Model, hw: Hardware, tp: int, pp: int, dp: int, zero_stage: int = 0,
             checkpointing: str = "none", micro_batch: int = 1, optimizer: str = "adam",
             hybrid: bool = False, efficiency: float = EFFICIENCY, cp: int = 1,
             ep: int = 1) -> Candidate:
    """Cost one layout: memory per GPU, traffic, bubble, step time and MFU."""
    m = model.global_batch // (dp * micro_batch)
    if m < 1 or m * dp * micro_batch != model.global_batch:
        raise ValueError(tr("global batch {gb} does not split into dp {dp} x micro-batch {mb} x a "
                            "whole number of micro-batches", gb=model.global_batch, dp=dp, mb=micro_batch))
    if ep > 1 and (model.experts % ep or (cp * dp) % ep):
        raise ValueError(tr("ep {ep} must divide the experts ({experts}) and cp x dp ({cp} x {dp} = "
                            "{cd})", ep=ep, experts=model.experts, cp=cp, dp=dp, cd=cp * dp))
    shard_group = hw.gpus_per_node if hybrid else dp * cp
    dense = (model.params - model.expert_params) / (tp * pp)        # parameters on this GPU
    expert = model.expert_params / (tp * pp * ep)
    held = dense + expert
    ms = model_states(dense, optimizer=optimizer, zero_stage=zero_stage, world_size=shard_group).device
    if expert:
        ms += model_states(expert, optimizer=optimizer, zero_stage=zero_stage,
                           world_size=max(1, dp * cp // ep)).device
    act = activations(model.layers // pp, model.hidden, model.heads, model.seq // cp, micro_batch, tp=tp,
                      sequence_parallel=tp > 1, checkpointing=checkpointing, vocab=model.vocab)
    in_flight = min(pp, m)                                          # 1F1B: first stage holds p
    act_bytes = act.stored * in_flight + act.recompute + act.output
    layer = 12 * model.hidden ** 2 / tp if not model.experts else held * pp / model.layers
    working = 4 * layer * 2 if zero_stage == 3 else 0               # 2 gathered layers + grads, 16-bit
    lay = Layout(dp=dp, pp=pp, tp=tp, gpus_per_node=hw.gpus_per_node, cp=cp, ep=ep)
    traf = step_traffic(lay, n_params=model.params, layers=model.layers, hidden=model.hidden,
                      seq=model.seq, micro_batch=micro_batch, micro_batches=m,
                      zero_stage=zero_stage, recompute=checkpointing == "full", heads=model.heads,
                      kv_heads=model.kv_heads, cp_method="allgather",
                      expert_params=model.expert_params, top_k=model.top_k)
    bw = {d: (hw.inter_gbps if lay.spans_nodes(d) else hw.intra_gbps) * 1e9 for d in DIMS}
    if ep > 1 and lay.spans_nodes("edp") and not lay.spans_nodes("dp"):
        bw["dp"] = hw.inter_gbps * 1e9                              # the experts' replicas are far
    comm = {d: getattr(traf, d) / bw[d] for d in DIMS}
    if hybrid and dp > shard_group:      # ZeRO-3 inside the node, all-reduce across nodes
        g, r = shard_group, dp // shard_group
        grads = held * 2
        intra = 3 * m * (g - 1) / g * grads
        inter = 2 * (r - 1) / r * grads / g
        traf = Traffic(tp=traf.tp, pp=traf.pp, dp=intra + inter, calls={**traf.calls, "dp": 3 * m + 1},
                     cp=traf.cp, ep=traf.ep)
        comm["dp"] = intra / (hw.intra_gbps * 1e9) + inter / (hw.inter_gbps * 1e9)
    per_token = flops_per_token(model.active, model.layers, model.hidden, model.seq)
    useful = per_token * model.tokens_per_step
    extra = {"none": 0.0, "selective": 4 * model.layers * model.hidden * model.seq,
             "full": 2 * model.active + 4 * model.layers * model.hidden * model.seq}[checkpointing]
    compute = (per_token + extra) * model.tokens_per_step / hw.gpus / (hw.peak_tflops * 1e12 * efficiency)
    bub = bubble_ratio(pp, m)
    exposed = comm["tp"] + comm["pp"] + comm["cp"] + comm["ep"]
    step = (compute + exposed) / (1 - bub) + dp_exposed(comm["dp"], compute, zero_stage)
    mfu = useful / (step * hw.gpus * hw.peak_tflops * 1e12)
    return Candidate(tp, pp, dp, zero_stage, hybrid, checkpointing, optimizer, micro_batch, m, ms,
                     act_bytes, working, hw.gpu_gb * GB, traf, comm, compute, bub, step, mfu, cp, ep)


def candidates(model: Model, hw: Hardware, optimizers=("adam",), efficiency: float = EFFICIENCY):
    """Every layout the hardware and the model allow, costed."""
    G = hw.gpus
    for tp in (t for t in (1, 2, 4, 8, 16) if hw.gpus_per_node % t == 0 and model.heads % t == 0
               and t <= hw.gpus_per_node):
        for pp in (p for p in range(1, min(model.layers, 64) + 1) if model.layers % p == 0):
            for cp in cp_choices(model):
                if G % (tp * pp * cp):
                    continue
                dp = G // (tp * pp * cp)
                for ep in ep_choices(model, cp, dp):
                    yield from _sharding_options(model, hw, tp, pp, dp, cp, ep, optimizers, efficiency)


def _sharding_options(model, hw, tp, pp, dp, cp, ep, optimizers, efficiency):
    simple = tp == pp == cp == ep == 1
    for zero in ((0,) if dp * cp == 1 else (0, 1, 2, 3)):
        for hybrid in ((False, True) if zero == 3 and simple and hw.nodes > 1 else (False,)):
            for ckpt in ("none", "selective", "full"):
                for opt in optimizers:
                    for mb in (1, 2, 4, 8, 16, 32):
                        if model.global_batch % (dp * mb):
                            continue
                        c = evaluate(model, hw, tp, pp, dp, zero, ckpt, mb, opt, hybrid,
                                     efficiency, cp, ep)
                        yield c
                        if not c.fits:      # a larger micro-batch needs more memory still
                            break


def _simplicity(c: Candidate) -> tuple:
    return ((c.tp > 1) + (c.pp > 1) + (c.cp > 1) + (c.ep > 1), c.pp, c.tp, c.cp, c.ep, c.zero_stage, c.hybrid,
            ("none", "selective", "full").index(c.checkpointing), -c.micro_batch)


def _best(cands, pred=lambda c: True):
    ok = [c for c in cands if c.fits and pred(c)]
    if not ok:
        return None
    fastest = min(c.step_seconds for c in ok)
    return min((c for c in ok if c.step_seconds <= fastest * 1.02), key=_simplicity)


@dataclass
class Plan:
    model: Model
    hardware: Hardware
    chosen: Candidate               # None when nothing fits
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
        body = "\n".join(f"  {k}: {v}" for k, v in self.reasons)
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


def plan(model: Model, hw: Hardware, efficiency: float = EFFICIENCY) -> Plan:
    """Walk the decision tree; return the fastest layout that fits, with a reason per branch."""
    cands = list(candidates(model, hw, efficiency=efficiency))
    R, G = [], hw.gpus
    one = evaluate(model, hw, 1, 1, 1, micro_batch=1) if model.global_batch >= 1 else None
    states = model_states(model.params).device
    R.append((tr("1. one GPU?"), tr("model state {state:.0f} GB (16 B/param, mixed-precision Adam) + "
                                "activations {act:.1f} GB at micro-batch 1 = {total:.0f} GB vs {usable:.0f} "
                                "GB usable: {fit}", state=states / GB, act=one.activations / GB,
                                total=one.memory / GB, usable=USABLE * hw.gpu_gb,
                                fit=tr("fits") if one.fits else tr("does not fit"))))
    best = _best(cands)
    if best is None:
        cands8 = list(candidates(model, hw, optimizers=("adam8bit",), efficiency=efficiency))
        best = _best(cands8)
        R.append((tr("8-bit optimizer"), tr("nothing fits with fp32 Adam states; ") +
                  (tr("8-bit Adam (m, v in 1 byte) makes it fit") if best else tr("not even with 8-bit Adam"))))
        if best is None:
            return Plan(model, hw, None, R)
        cands = cands8
    if G == 1:
        R.append((tr("2. data parallel"), tr("one GPU: nothing to replicate")))
    else:
        ddp = _best(cands, lambda c: c.tp == c.pp == c.cp == c.ep == 1 and c.zero_stage == 0)
        zero = _best(cands, lambda c: c.tp == c.pp == c.cp == c.ep == 1 and c.zero_stage > 0
                     and not c.hybrid)
        R.append((tr("2. DP / ZeRO / FSDP"), (tr("DDP fits ({short}); the notes' 'fits: no parallelism' is "
                  "for one GPU: with more GPUs practice replicates the model for throughput",
                  short=ddp.short()) if ddp else tr("DDP does not fit (every GPU holds all 16 B/param)")) +
                  (tr("; best sharded: {short}", short=zero.short()) if zero
                   else tr("; ZeRO over all GPUs does not fit"))))
    ck = [c for c in cands if c.fits and (c.tp, c.pp, c.dp, c.zero_stage, c.hybrid, c.micro_batch) ==
          (best.tp, best.pp, best.dp, best.zero_stage, best.hybrid, best.micro_batch)]
    none = evaluate(model, hw, best.tp, best.pp, best.dp, best.zero_stage, "none", best.micro_batch,
                    best.optimizer, best.hybrid, efficiency)
    R.append((tr("3. checkpointing"), tr("{ck}: activations {act:.1f} GB/GPU (without: {without:.1f} GB, "
                                     "{fit})", ck=tr(best.checkpointing), act=best.activations / GB,
                                     without=none.activations / GB,
                                     fit=tr("fits") if none.fits else tr("does not fit"))
              + ("" if len(ck) > 1 or best.checkpointing == "none" else tr("; the only setting that fits"))))
    no_tp = _best(cands, lambda c: c.tp == 1)
    if best.tp > 1:
        why = (tr("without TP nothing fits") if no_tp is None else
               tr("best without TP: {short}", short=no_tp.short()))
        R.append((tr("4. TP inside the node"), tr("TP {tp} keeps its {calls} all-reduces per step on NVLink "
                                              "and divides weights, activations and DP traffic by {tp}; "
                                              "{why}", tp=best.tp, calls=best.traffic.calls['tp'], why=why)))
    else:
        tp8 = _best(cands, lambda c: c.tp > 1)
        R.append((tr("4. TP inside the node"), tr("not needed: the layers fit whole") +
                  (tr(" (best with TP: {short})", short=tp8.short()) if tp8 else "")))
    no_pp = _best(cands, lambda c: c.pp == 1)
    if best.pp > 1:
        R.append((tr("5. PP across nodes"), tr("PP {pp}: bubble {bubble:.1%} with {m} micro-batches; ",
                                           pp=best.pp, bubble=best.bubble, m=best.micro_batches)
                  + (tr("without PP nothing fits") if no_pp is None
                     else tr("best without PP: {short}", short=no_pp.short()))))
    else:
        R.append((tr("5. PP across nodes"), tr("not needed: the layers fit on each GPU (or its TP group)")))
    if hw.nodes > 1:
        hyb = _best(cands, lambda c: c.hybrid)
        R.append((tr("6. hybrid sharding"), ((tr("chosen: {short}", short=hyb.short()) if best.hybrid
                                          else tr("best hybrid: {short}", short=hyb.short()))
                  if hyb else tr("does not fit (a node's GPUs alone cannot hold the model states)"))))
    R.extend(cp_ep_reasons(model, cands, best, _best))
    R.append((tr("choice"), tr("the fastest layout that fits (among those within 2 % of it, the simplest)")))
    return Plan(model, hw, best, R)

