"""The capstone's step measured like the earlier modules (layer 3): bytes per dimension counted
on the ranks against the modules' formulas, memory per rank against the planner's, and the
events of one step for a Gantt across all ranks.

    res = cluster.run(record_step, Config(), dp=2, pp=2, tp=2)    # every rank's counts and events
    rows = traffic_rows(res, Config(), dp=2, pp=2, tp=2)          # counted vs formula, per stage
    mem = memory_rows(res, Config(), dp=2, pp=2, tp=2)            # parameters, gradients, ...

`record_step` runs one step of `labkit.capstone.train` unchanged (after one unrecorded warm-up
step, in which gloo opens each group's connections), with torch.distributed's
all_reduce, isend and irecv wrapped on this rank for the step: each call's tensor bytes (the
payload, no gloo headers) and its start and end, under the dimension whose group it ran on
(p2p: PP). Stage forwards and backward passes are timed too (the Gantt's F and B). The wire
bytes follow from the payload by the ring formula (labkit.comm.formulas, notebook 02): an
all-reduce of S bytes over n ranks sends 2 (n-1)/n S from each rank, a point-to-point send S.

The formulas (`formulas`), from the configuration alone, each from its module:
- TP (notebook 06, Megatron-LM): per layer on this stage and per micro-batch, two all-reduces of
  the activations (b s h values) in forward and two in backward;
- PP (notebook 07): each micro-batch's activations to the next stage, their gradients back;
- DP (notebook 03): this rank's gradients all-reduced once per step: 4 bytes x the parameters it
  holds, counted from the model's shapes (embeddings on the first stage, the head on the last,
  12 h^2 + 7 h of each block split over TP, its 6 h of norms and row biases whole);
- the scalars: the global norm's square summed over TP and PP, the loss over PP and DP.
`labkit.plan.traffic.step_traffic` (notebook 08's planner) gives the same TP and PP bytes and,
for DP, params / (tp pp): an average that ignores where the embeddings and the head sit.
"""
import time

import torch
import torch.distributed as dist

from labkit.capstone.model import Config
from labkit.i18n import N_

__all__ = ["record_step", "formulas", "traffic_rows", "memory_rows", "params_on_rank", "timed_steps",
           "speed_rows", "LAYOUTS"]

F32 = 4


def params_on_rank(cfg: Config, pp: int, tp: int, stage: int) -> int:
    """Parameters one rank of pipeline stage `stage` holds, from the shapes (see the module)."""
    h = cfg.n_embd
    n = cfg.n_layer // pp * ((12 * h * h + 7 * h) // tp + 6 * h)
    if stage == 0:
        n += cfg.vocab * h + cfg.seq * h
    if stage == pp - 1:
        n += 2 * h + cfg.vocab * h
    return n


def formulas(cfg: Config, dp: int, pp: int, tp: int, stage: int) -> dict:
    """{(dim, what): (calls, payload bytes)} one rank of `stage` should count in one step."""
    m = cfg.microbatches
    act = cfg.batch // dp // m * cfg.seq * cfg.n_embd * F32
    per_layer = cfg.n_layer // pp
    out = {}
    if tp > 1:
        out[("tp", N_("activations all-reduce"))] = (4 * per_layer * m, 4 * per_layer * m * act)
    if pp > 1:
        ends = (stage > 0) + (stage < pp - 1)
        out[("pp", N_("activations/gradients sent"))] = (ends * m, ends * m * act)
        out[("pp", N_("activations/gradients received"))] = (ends * m, ends * m * act)
    if dp > 1:
        out[("dp", N_("gradients all-reduce"))] = (1, params_on_rank(cfg, pp, tp, stage) * F32)
    scal = {"tp": int(tp > 1), "pp": 2 * int(pp > 1), "dp": int(dp > 1)}
    for d, k in scal.items():
        if k:
            out[(d, N_("scalars all-reduce (norm, loss)"))] = (k, k * 8)
    return out


def record_step(cfg: Config = Config(), dp: int = 2, pp: int = 2, tp: int = 2) -> dict:
    """One step of labkit.capstone.train on this rank, every collective counted and timed.
    Returns {"rank", "coords", "counts": {(dim, what): [calls, bytes]}, "events": [(kind, dim,
    start, end, label)], "memory": {category: bytes}, "losses"}."""
    from labkit.capstone import trainer
    layout, g = trainer.groups(dp, pp, tp)
    names = {}
    for d in ("tp", "pp", "dp"):
        names.setdefault(id(g[d]), d)
    counts, events, held = {}, [], {}
    real = {k: getattr(dist, k) for k in ("all_reduce", "isend", "irecv")}
    real_backward, real_stage_of = torch.Tensor.backward, trainer.stage_of
    fwd_i, bwd_i = [0], [0]
    trainer.train(cfg, dp=dp, pp=pp, tp=tp, steps=1)   # warm-up: gloo connects each group on first use

    def add(key, nbytes):
        c = counts.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += nbytes

    def all_reduce(t, *a, group=None, **k):
        d = names.get(id(group), "world")
        what = N_("scalars all-reduce (norm, loss)") if t.dtype == torch.float64 and t.numel() == 1 \
            else (N_("gradients all-reduce") if d == "dp" else N_("activations all-reduce"))
        add((d, what), t.numel() * t.element_size())
        t0 = time.perf_counter()
        out = real["all_reduce"](t, *a, group=group, **k)
        events.append(("AR", d, t0, time.perf_counter(), what))
        return out

    class _Timed:
        def __init__(self, work, kind):
            self.work, self.kind = work, kind

        def wait(self, *a):
            t0 = time.perf_counter()
            r = self.work.wait(*a)
            events.append((self.kind, "pp", t0, time.perf_counter(), ""))
            return r

    def isend(t, *a, **k):
        add(("pp", N_("activations/gradients sent")), t.numel() * t.element_size())
        return _Timed(real["isend"](t, *a, **k), "send wait")

    def irecv(t, *a, **k):
        add(("pp", N_("activations/gradients received")), t.numel() * t.element_size())
        return _Timed(real["irecv"](t, *a, **k), "recv wait")

    def backward(self, *a, **k):
        t0 = time.perf_counter()
        r = real_backward(self, *a, **k)
        events.append(("B", "", t0, time.perf_counter(), str(bwd_i[0])))
        bwd_i[0] += 1
        return r

    def stage_of(*a, **k):
        st = real_stage_of(*a, **k)
        held["stage"] = st
        start = {}
        st.register_forward_pre_hook(lambda *_: start.__setitem__("t", time.perf_counter()))

        def post(*_):
            events.append(("F", "", start["t"], time.perf_counter(), str(fwd_i[0])))
            fwd_i[0] += 1
        st.register_forward_hook(post)
        return st

    saved = [0]

    def pack(t):
        if not isinstance(t, torch.nn.Parameter):
            saved[0] += t.numel() * t.element_size()
        return t

    for k, f in (("all_reduce", all_reduce), ("isend", isend), ("irecv", irecv)):
        setattr(dist, k, f)
    torch.Tensor.backward, trainer.stage_of = backward, stage_of
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            res = trainer.train(cfg, dp=dp, pp=pp, tp=tp, steps=1)
    finally:
        for k, f in real.items():
            setattr(dist, k, f)
        torch.Tensor.backward, trainer.stage_of = real_backward, real_stage_of
    from labkit.memory.accounting import measure
    b = measure(held["stage"])
    memory = {"parameters": b.params, "gradients": b.grads, N_("optimizer states"): 0,
              N_("activations (saved, all micro-batches)"): saved[0]}
    return {"rank": res["rank"], "coords": res["coords"], "losses": res["losses"],
            "counts": counts, "events": events, "memory": memory}


def _stage(r, dp, pp, tp):
    from labkit.nd.layout import Layout
    return Layout(dp=dp, pp=pp, tp=tp, gpus_per_node=max(8, dp * pp * tp)).coords(r["rank"]).pp


def traffic_rows(results: list, cfg: Config, dp: int, pp: int, tp: int) -> list:
    """[{dim, what, stage, ranks, calls, bytes (counted: (min, max) over the stage's ranks),
    formula (calls, bytes), sent / sent_formula (on the wire, by the ring formula), planner, ok}]."""
    from labkit.plan.traffic import step_traffic
    from labkit.nd.layout import Layout
    n = {"tp": tp, "pp": pp, "dp": dp}
    plan = step_traffic(Layout(dp=dp, pp=pp, tp=tp, gpus_per_node=max(8, dp * pp * tp)),
                        n_params=sum(params_on_rank(cfg, pp, 1, s) for s in range(pp)),
                        layers=cfg.n_layer, hidden=cfg.n_embd, seq=cfg.seq,
                        micro_batch=cfg.batch // dp // cfg.microbatches,
                        micro_batches=cfg.microbatches, bytes_per_value=F32)
    rows = []
    for stage in range(pp):
        mine = [r for r in results if _stage(r, dp, pp, tp) == stage]
        want = formulas(cfg, dp, pp, tp, stage)
        keys = sorted(set(want) | {k for r in mine for k in r["counts"]})
        for key in keys:
            got = [tuple(r["counts"].get(key, (0, 0))) for r in mine]
            calls, nbytes = want.get(key, (0, 0))
            dim, what = key
            wire = (lambda b: b) if "received" in what or "sent" in what else \
                (lambda b, k=n.get(dim, 1): 2 * (k - 1) / k * b)
            planner = None
            if what == N_("activations all-reduce") or what == N_("activations/gradients sent") \
                    or what == N_("gradients all-reduce"):
                planner = getattr(plan, dim)
            rows.append({"dim": dim, "what": what, "stage": stage, "ranks": [r["rank"] for r in mine],
                         "calls": (min(c for c, _ in got), max(c for c, _ in got)),
                         "bytes": (min(b for _, b in got), max(b for _, b in got)),
                         "formula": (calls, nbytes), "sent": max(wire(b) for _, b in got),
                         "sent_formula": wire(nbytes), "planner": planner,
                         "ok": all(g == (calls, nbytes) for g in got)})
    return rows


def memory_rows(results: list, cfg: Config, dp: int, pp: int, tp: int) -> list:
    """[{rank, stage, category, bytes, formula, planner, ok}]: parameters and gradients against
    4 B x params_on_rank, optimizer states (plain SGD: none), the activations saved for backward
    (counted, no formula: fp32 TinyGPT is not the planner's 16-bit model). planner: notebook 08's
    params / (tp pp) x 4 B, the average over stages."""
    total = sum(params_on_rank(cfg, pp, 1, s) for s in range(pp))
    rows = []
    for r in results:
        s = _stage(r, dp, pp, tp)
        exact = params_on_rank(cfg, pp, tp, s) * F32
        for cat, b in r["memory"].items():
            f = {"parameters": exact, "gradients": exact, N_("optimizer states"): 0}.get(cat)
            p = total / (tp * pp) * F32 if cat in ("parameters", "gradients") else (0 if f == 0 else None)
            rows.append({"rank": r["rank"], "stage": s, "category": cat, "bytes": b, "formula": f,
                         "planner": p, "ok": f is None or b == f})
    return rows


LAYOUTS = ((2, 2, 2), (4, 2, 1), (4, 1, 2), (2, 1, 4))      # (dp, pp, tp) on 8 ranks


def timed_steps(cfg: Config = Config(), layouts=LAYOUTS, steps: int = 2) -> dict:
    """On every rank: for each (dp, pp, tp) one warm-up step, then `steps` steps of
    labkit.capstone.train between barriers, in one run. Returns {layout: seconds}."""
    from labkit.capstone import trainer
    out = {}
    for lay in layouts:
        trainer.train(cfg, *lay, steps=1)
        dist.barrier()
        t0 = time.perf_counter()
        trainer.train(cfg, *lay, steps=steps)
        dist.barrier()
        out[lay] = time.perf_counter() - t0
    return out


def speed_rows(results: list, cfg: Config = Config(), steps: int = 2) -> list:
    """[{layout, tokens_s (measured: the slowest rank), ratio (to the first layout, one run),
    predicted (the planner's tokens/s for this model on 8 H100s, labkit.plan.evaluate)}]."""
    from labkit.plan.shapes import Hardware, Model
    from labkit.plan.planner import evaluate
    total = params_on_rank(cfg, 1, 1, 0)                          # the whole model
    model = Model(name="capstone TinyGPT", params=total, layers=cfg.n_layer, hidden=cfg.n_embd,
                  heads=cfg.n_head, seq=cfg.seq, global_batch=cfg.batch, vocab=cfg.vocab)
    tokens = steps * cfg.batch * cfg.seq
    rows = []
    for lay in results[0]:
        dp, pp, tp = lay
        seconds = max(r[lay] for r in results)
        c = evaluate(model, Hardware(), tp=tp, pp=pp, dp=dp, micro_batch=cfg.batch // dp // cfg.microbatches)
        rows.append({"layout": lay, "tokens_s": tokens / seconds,
                     "predicted": model.tokens_per_step / c.step_seconds})
    for r in rows:
        r["ratio"] = r["tokens_s"] / rows[0]["tokens_s"]
    return rows
