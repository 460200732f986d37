"""Prefetch in FSDP2: when each block's all-gather is issued against when its compute runs (layer 3).

    r = cluster.run(labkit.fsdp.prefetch.timeline, prefetch=True)

FSDP2 gathers a unit just before it runs (its pre-forward / pre-backward hook). Explicit
prefetch (`blocks[i].set_modules_to_forward_prefetch([blocks[i + 1]])`, and
`set_modules_to_backward_prefetch([blocks[i - 1]])` for backward) makes unit i's hook also issue
unit i+1's all-gather, BEFORE unit i's compute. On a GPU the all-gather runs on its own CUDA
stream, so issuing it earlier lets it overlap unit i's compute; FSDP1's `limit_all_gathers`
caps how many gathered units may be in flight (a CUDA-event rate limiter) so early issue does
not blow up memory. On CPU gloo carries a collective on its own thread, so an all-gather
issued early can run while the rank computes, when a core is free (measured on two shared cores,
run to run: 132 against 176 ms median once, no difference beyond the spread another time). This module records the order:
each all-gather and reduce-scatter (labkit.fsdp.comm_log: unit, t0, t1) and each block's
forward and backward compute (module hooks), on one clock per rank.
"""
import time

import torch.distributed as dist


def timeline(prefetch: bool = False, n_layer: int = 4, batch_per_rank: int = 4, repeats: int = 5) -> dict:
    """One rank's forward + backward with or without explicit prefetch: the events of the last
    of `repeats` timed steps, and every step's time in ms ("step_ms"; one step's time on two
    shared CPU cores is noise: compare medians)."""
    from labkit.fsdp import apply
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    model, batch = tiny_gpt(n_layer=n_layer)
    apply.shard(model, wrap="block", strategy="full")
    blocks = list(model.blocks)
    if prefetch:
        for i, b in enumerate(blocks):
            if i + 1 < len(blocks):
                b.set_modules_to_forward_prefetch([blocks[i + 1]])
            if i > 0:
                b.set_modules_to_backward_prefetch([blocks[i - 1]])
    events, open_ = [], {}

    def start(name, kind):
        def hook(*_):
            open_[(name, kind)] = time.perf_counter()
        return hook

    def end(name, kind):
        def hook(*_):
            events.append({"kind": kind, "unit": name, "t0": open_.pop((name, kind)), "t1": time.perf_counter()})
        return hook

    for i, b in enumerate(blocks):
        name = f"blocks.{i}"
        b.register_forward_pre_hook(start(name, "forward"))       # after FSDP's own pre-hook: compute starts
        b.register_forward_hook(end(name, "forward"))
        b.register_full_backward_pre_hook(start(name, "backward"))
        b.register_full_backward_hook(end(name, "backward"))
    x, y = batch(n, batch_per_rank)
    mine = slice(batch_per_rank * r, batch_per_rank * (r + 1))
    lm_loss(model(x[mine]), y[mine]).backward()                 # warm-up (lazy init)
    model.zero_grad()
    step_ms = []
    for _ in range(repeats):
        model.zero_grad()
        apply.comm_log(model, clear=True)
        events.clear()
        dist.barrier()
        t = time.perf_counter()
        lm_loss(model(x[mine]), y[mine]).backward()
        step_ms.append((time.perf_counter() - t) * 1e3)
    events += [{"kind": c["kind"], "unit": c["unit"], "t0": c["t0"], "t1": c["t1"]} for c in apply.comm_log(model)]
    events.sort(key=lambda e: e["t0"])
    for e in events:
        e["t0"], e["t1"] = e["t0"] - t, e["t1"] - t
    return {"rank": r, "prefetch": prefetch, "events": events, "order": order(events), "step_ms": step_ms}


def order(events) -> list:
    """The events as short labels in the order they started: 'AG blocks.1', 'F blocks.0', ..."""
    short = {"all_gather": "AG", "reduce_scatter": "RS", "forward": "F", "backward": "B"}
    return [f"{short[e['kind']]} {e['unit']}" for e in events]


def gathered_ahead(events, phase: str = "forward") -> list:
    """Blocks i whose successor's all-gather (block i+1 in forward, i-1 in backward) was issued
    while block i had not finished computing: in forward, before block i's compute STARTED (the
    hook order is exact there); in backward, before it ended (FSDP2's pre-backward hook and
    the module's backward pre-hook fire on the same gradient, in either order). From one rank."""
    if phase not in ("forward", "backward"):
        raise ValueError(f"phase must be 'forward' or 'backward', got {phase!r}")
    fwd_end = max((e["t1"] for e in events if e["kind"] == "forward"), default=0.0)
    out = []
    for c in (e for e in events if e["kind"] == phase):
        i = int(c["unit"].split(".")[1])
        nxt = f"blocks.{i + 1 if phase == 'forward' else i - 1}"
        for g in (e for e in events if e["kind"] == "all_gather" and e["unit"] == nxt):
            in_phase = g["t0"] < fwd_end if phase == "forward" else g["t0"] >= fwd_end
            if in_phase and g["t0"] <= (c["t0"] if phase == "forward" else c["t1"]):
                out.append(i)
                break
    return sorted(out)
