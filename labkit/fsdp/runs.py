"""One FSDP2 training step on a rank, measured against one process and the formulas (layer 4).

    report = cluster.run(labkit.fsdp.runs.step_report, wrap="block", strategy="full")

Each rank trains a copy of the same model on its slice of a global batch; after the step the
full parameters (gathered from the shards) are compared with one process trained on the whole
batch. Around forward + backward: bytes this rank sent on the wire (labkit.comm.traffic, gloo's
headers included), the all-gathers and reduce-scatters FSDP made (labkit.fsdp.comm_log), and
after the step the bytes held by category (labkit.memory.measure), each beside its prediction.
"""
import copy

import torch
import torch.distributed as dist

from labkit import numerics
from labkit.fsdp import apply
from labkit.fsdp.strategies import bytes_per_step, calls_per_step
from labkit.i18n import N_, tr


def mp_policy(precision: str):
    """None for fp32; FSDP2's MixedPrecisionPolicy for 'bf16' (bf16 parameters and reductions)."""
    if precision == "fp32":
        return None
    if precision != "bf16":
        raise ValueError(tr("precision must be 'fp32' or 'bf16', got {precision!r}",
                            precision=precision))
    from torch.distributed.fsdp import MixedPrecisionPolicy
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)


def tiny_gpt(n_layer: int = 2, n_embd: int = 64):
    """A 2-block TinyGPT (105k parameters) and its global batch for `n` ranks."""
    from labkit.toy_models import GPTConfig, TinyGPT, token_batch
    torch.manual_seed(0)
    m = TinyGPT(GPTConfig(n_layer=n_layer, n_embd=n_embd, n_head=4, vocab_size=67, block_size=16))
    return m, lambda n, per_rank: token_batch(per_rank * n, 16, 67, seed=0)


def awkward():
    """AwkwardNet: a tied weight, a frozen parameter, sizes that divide by no world size."""
    from labkit.toy_models import AwkwardNet, awkward_batch
    torch.manual_seed(0)
    return AwkwardNet(), lambda n, per_rank: awkward_batch(per_rank * n)


MODELS = {"tiny_gpt": tiny_gpt, "awkward": awkward}


def step_report(wrap: str = "block", strategy: str = "full", ring: bool = False, replicas: int = 2,
                model: str = "tiny_gpt", batch_per_rank: int = 4, lr: float = 1e-2) -> dict:
    import labkit
    from labkit.comm import traffic
    from labkit.memory import measure, model_states
    from labkit.toy_models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = MODELS[model]()
    model = copy.deepcopy(ref)
    shard_ranks = {"hybrid": n // replicas, "no_shard": 1}.get(strategy, n)
    groups = apply.groups(model, wrap, strategy, shard_ranks)
    apply.shard(model, wrap=wrap, strategy=strategy, replicas=replicas, ring=ring)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = batch(n, batch_per_rank)
    mine = slice(batch_per_rank * r, batch_per_rank * (r + 1))
    apply.comm_log(model, clear=True)
    with traffic.measure(sync=True) as t:
        lm_loss(model(x[mine]), y[mine]).backward()
    log = apply.comm_log(model)
    opt.step()
    held = measure(model, opt)
    ropt = torch.optim.Adam(ref.parameters(), lr=lr)
    lm_loss(ref(x), y).backward()
    grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach()
             for k, p in ref.state_dict(keep_vars=True).items()}
    ropt.step()
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    err = max((full[k] - v).abs().max().item() for k, v in ref.state_dict().items())
    # Each element against its own derived bound (labkit.numerics.one_step_over_bound: the
    # gradient summed over the batch's tokens in another order, through one Adam step, which
    # allows up to 2 lr where |g| is within that rounding of 0)
    over = numerics.one_step_over_bound(full, ref.state_dict(), grads, y.numel(), lr, "adam")
    backend = "nccl" if ring else "gloo"            # the ring sends what NCCL's reduce-scatter sends
    n_params = sum(p.numel() for p in {id(p): p for p in ref.parameters()}.values())
    # after the step FSDP2 holds shards in every sharded strategy (grad_op too: it reshards after
    # backward), so the formula to compare with is ZeRO-3 over the shard group, or DDP for no_shard
    stage = 0 if strategy == "no_shard" else 3
    padded = sum(g.param_bytes for g in groups) // 4            # fp32: padded elements, all units
    return {"rank": labkit.rank(), "wrap": wrap, "strategy": strategy, "ring": ring, "max_err": err,
            "err_over_bound": over,
            "sent": t.sent, "predicted_sent": bytes_per_step(groups, strategy, n, replicas=replicas,
                                                             backend=backend)["total"],
            "calls": apply.counts(log), "predicted_calls": calls_per_step(groups, strategy),
            "measured": held,
            "formula": model_states(n_params, precision="fp32", zero_stage=stage,
                                    world_size=shard_ranks),
            "padding_elements": padded - n_params,
            # frozen parameters hold no gradient and no Adam state: the formula's grads are
            # trainable elements only
            "grads_expected": sum(g.grad_bytes for g in groups) // shard_ranks,      # FSDP2 rounds dim 0 up to the shard count
            "formula_padded": model_states(padded, precision="fp32", zero_stage=stage,
                                           world_size=shard_ranks)}


# FSDPMemTracker's categories, in the words the course uses
PEAK_NAMES = {"SHARDED_PARAM": N_("params (shard)"), "UNSHARDED_PARAM": N_("params (gathered)"),
              "SHARDED_GRAD": N_("grads (shard)"), "UNSHARDED_GRAD": N_("grads (gathered)"),
              "ALL_GATHER": N_("all-gather buffers"), "REDUCE_SCATTER": N_("reduce-scatter buffers"),
              "OPT": N_("optimizer state"), "ACT": N_("activations"), "TEMP": N_("temporary"),
              "BUFFER": N_("buffers"), "INP": N_("inputs")}


HOST_IF_OFFLOADED = ("params (shard)", "grads (shard)", N_("optimizer state"))


def watch_device_peak(tracker) -> list:
    """[the most bytes a GPU would hold at once] over what `tracker` (an FSDPMemTracker) sees
    from now on: with CPUOffloadPolicy the sharded parameters, their gradients and the optimizer
    state live in host memory, so the device holds the rest. Taken after every operator, like
    the tracker's own peak: the device's peak is not the device part of the total's peak (with
    no_shard, the total peaks in the optimizer step, when the activations are gone). Accounting
    on a CPU-only machine; reset with `box[0] = 0`."""
    box = [0]
    host = {k for k, v in PEAK_NAMES.items() if v in HOST_IF_OFFLOADED}
    update = tracker._update_peak_stats                 # private; tested on torch 2.13

    def also_device(peak_state):
        update(peak_state)
        for snap in tracker._curr_mem_snap.values():
            here = snap["Total"] - sum(v for k, v in snap.items() if getattr(k, "name", None) in host)
            box[0] = max(box[0], here)
    tracker._update_peak_stats = also_device
    return box


def peak_report(wrap: str = "block", strategy: str = "full", model: str = "tiny_gpt",
                batch_per_rank: int = 4, precision: str = "fp32", offload: bool = False,
                model_kw: dict = None) -> dict:
    """Peak bytes on this rank over a training step, by category, from torch's FSDPMemTracker
    (a TorchDispatchMode that sees every storage; exact on CPU). The first step creates Adam's
    state, so the second step is the one reported. Also: all-gathers and reduce-scatters per
    step, and the step's time on this rank. precision="bf16": MixedPrecisionPolicy with bf16
    parameters and reductions (fp32 sharded parameters stay the master); offload=True:
    CPUOffloadPolicy (on a CPU-only machine nothing moves: see labkit.fsdp.precision)."""
    import time
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from labkit.toy_models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = MODELS[model](**(model_kw or {}))
    m = apply.shard(ref, wrap=wrap, strategy=strategy, mp_policy=mp_policy(precision), offload=offload)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, foreach=False)   # foreach inflates the tracked peak
    x, y = batch(n, batch_per_rank)
    x, y = x[batch_per_rank * r:batch_per_rank * (r + 1)], y[batch_per_rank * r:batch_per_rank * (r + 1)]
    tracker = FSDPMemTracker(m, opt)
    tracker.track_inputs((x,))
    device = watch_device_peak(tracker)
    with tracker:
        for i in range(2):
            if i == 1:
                tracker.reset_mod_stats()
                device[0] = 0
                apply.comm_log(m, clear=True)
                t0 = time.perf_counter()
            lm_loss(m(x), y).backward()
            opt.step()
            opt.zero_grad()
        seconds = time.perf_counter() - t0
    snap = next(iter(tracker.get_tracker_snapshot("peak").values()))
    peak = {PEAK_NAMES[k.name]: v for k, v in snap.items() if hasattr(k, "name") and v}
    return {"rank": r, "wrap": wrap, "strategy": strategy, "precision": precision, "offload": offload,
            "peak": peak, "total": snap["Total"], "device_peak": device[0] if offload else snap["Total"],
            "calls": apply.counts(apply.comm_log(m)), "seconds": seconds}
