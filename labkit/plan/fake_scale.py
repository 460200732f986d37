"""Full scale without the hardware: real FSDP2 (and TP) on a fake process group of N ranks.

    rows = fake_scale([("70B", 1024, 8), ("7B", 64, 1)])   # runs in a subprocess; list of dicts
    rows = fake_scale([("70B", 1024, 8, 16)])              # + context parallelism: 8 x 16 x 8
    rows = fake_scale([], moe=[("Mixtral-8x7B", 64, 8)])   # expert parallelism (labkit.plan.fake_moe)
    step = tracked_step("70B", n_layers=2, world_size=64, tp=8)   # peak of one step, by category

Each case builds the actual model (labkit.plan.llama) on the meta device, applies DTensor TP
(when tp > 1) and FSDP2's `fully_shard` on a device mesh of `world_size` ranks through torch's
fake process group (`FakeStore`, backend "fake": collectives return at once, nothing is
allocated), and reads this rank's parameter, gradient and Adam-state bytes from the shards.
Known traps, avoided here: build on meta, not under FakeTensorMode (about 25x slower); under
the memory tracker use Adam with foreach=False (the foreach path inflates the optimizer peak
under fake tensors); embeddings, output layer and norms are sharded by DP only (the TP plan
leaves them whole), a term named in the comparison.
Never call these on a rank of a Cluster: they start their own (fake) process group.
"""
import json
import math
import subprocess
import sys

import torch
import torch.distributed as dist

from labkit.plan.fake_pg import _init, _local, _nbytes, _state_only_step  # noqa: F401 (here before)
from labkit.plan.llama import LLAMA, Llama, LlamaConfig


def _config(name, n_layers=None) -> LlamaConfig:
    from dataclasses import replace
    c = LLAMA[name] if isinstance(name, str) else name
    return replace(c, n_layers=n_layers) if n_layers else c


def _tp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel()}


def build_sharded(cfg: LlamaConfig, world_size: int, tp: int = 1, mp=None, cp: int = 1):
    """The model on meta, TP inside blocks (over `tp`), FSDP2 over the rest; on a fake PG.
    With cp > 1 the mesh is (dp, cp, tp) and FSDP shards over the flattened dp x cp ranks, as
    torchtitan's "dp_shard_cp" does: the CP ranks hold the same weights."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    if world_size % (tp * cp):
        raise ValueError(f"world size {world_size} is not a multiple of tp {tp} x cp {cp}")
    _init(world_size)
    dp = world_size // (tp * cp)
    if cp > 1:
        mesh = init_device_mesh("cpu", (dp, cp, tp), mesh_dim_names=("dp", "cp", "tp"))
        shard_mesh = mesh["dp", "cp"]._flatten("dp_cp")
    else:
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        shard_mesh = mesh["dp"]
    with torch.device("meta"):
        model = Llama(cfg)
    kw = {"mesh": shard_mesh} if mp is None else {"mesh": shard_mesh, "mp_policy": mp}
    for block in model.layers:
        if tp > 1:
            parallelize_module(block, mesh["tp"], _tp_plan())
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model, dp * cp


def shard_bytes(name, world_size: int, tp: int = 1, cp: int = 1) -> dict:
    """Rank 0's bytes of parameters, gradients and Adam state, with the formula and its terms.
    `dp` in the result counts the ranks the weights are sharded over (dp x cp)."""
    from labkit.memory import model_states
    cfg = _config(name)
    model, dp = build_sharded(cfg, world_size, tp, cp=cp)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.Adam(params, lr=1e-4, foreach=False)
    _state_only_step(opt)                                 # creates the real state, on meta
    out = {"model": name, "world_size": world_size, "tp": tp, "cp": cp, "dp": dp,
           "params": sum(_nbytes(p) for p in params), "grads": sum(_nbytes(p.grad) for p in params),
           "optimizer": sum(_nbytes(v) for s in opt.state.values() for k, v in s.items()
                            if torch.is_tensor(v) and k != "step"),
           "step scalars": sum(_nbytes(s["step"]) for s in opt.state.values())}
    out["measured"] = out["params"] + out["grads"] + out["optimizer"]
    # formula: 16 B per parameter, ZeRO-3 over dp, of the parameters one TP rank holds
    out["formula"] = model_states(cfg.params / tp, zero_stage=3, world_size=dp).model_state
    whole = cfg.embed_params + (2 * cfg.n_layers + 1) * cfg.dim      # not split by TP
    out["dp only"] = 16 * whole * (1 - 1 / tp) / dp if tp > 1 else 0.0
    pad = 0.0
    for p in params:                                      # rank 0 holds ceil(rows / dp) rows
        full = _local_tp_shape(p, tp)
        rows, rest = full[0], math.prod(full[1:])
        pad += (math.ceil(rows / dp) - rows / dp) * rest
    out["padding"] = 16 * pad
    out["difference"] = out["measured"] - out["formula"] - out["dp only"] - out["padding"]
    dist.destroy_process_group()
    return out


def _local_tp_shape(p, tp):
    """Shape of the parameter on one TP rank (before FSDP's dim-0 split)."""
    from torch.distributed.tensor import Shard
    shape = list(p.shape)
    for mesh_dim, pl in enumerate(p.placements):
        if p.device_mesh.mesh_dim_names[mesh_dim] == "tp" and isinstance(pl, Shard):
            shape[pl.dim] //= tp
    return shape


def tracked_step(name, n_layers: int, world_size: int, tp: int = 1, batch: int = 1,
                 seq: int = 1024) -> dict:
    """Peak bytes of one training step on rank 0, by FSDPMemTracker's categories, with fake
    tensors. The second step is tracked (the first creates the optimizer state)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    cfg = _config(name, n_layers)
    model, dp = build_sharded(cfg, world_size, tp)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq))
        model(tokens).sum().backward()      # step 1, untracked: creates Adam's state
        opt.step()
        opt.zero_grad()
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((tokens,))
        with tracker:                       # step 2: every category present
            model(tokens).sum().backward()
            opt.step()
            opt.zero_grad()
        peak = tracker.get_tracker_snapshot("peak")
    dist.destroy_process_group()
    dev = next(iter(peak))
    cats = {str(k.value if hasattr(k, "value") else k): int(v) for k, v in peak[dev].items()}
    whole = cfg.embed_params + (2 * cfg.n_layers + 1) * cfg.dim
    formula = 4 * cfg.params / world_size + (4 * whole * (1 - 1 / tp) / dp if tp > 1 else 0)
    return {"model": f"{name} ({n_layers} layers)", "world_size": world_size, "tp": tp,
            "peak": cats, "params": cfg.params, "formula params": formula,
            "formula optimizer": 2 * formula}


def fake_scale(cases, step=None, timeout: float = 300, moe=()) -> dict:
    """Run shard_bytes for each (model, world_size, tp[, cp]) case, `labkit.plan.fake_moe.
    shard_bytes` for each (model, world_size, ep) of `moe`, and optionally one tracked_step
    (a dict of its arguments), in a fresh subprocess; returns {"rows", "moe", "step"}."""
    arg = json.dumps({"cases": [list(c) for c in cases], "step": step, "moe": [list(c) for c in moe]})
    proc = subprocess.run([sys.executable, "-m", "labkit.plan.fake_scale", arg],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise RuntimeError("the fake-scale subprocess failed:\n" + proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _main(arg: str) -> None:
    import time
    import warnings
    warnings.filterwarnings("ignore")
    spec = json.loads(arg)
    rows = []
    for case in spec["cases"]:
        t = time.perf_counter()
        row = shard_bytes(*case)
        row["seconds"] = time.perf_counter() - t
        rows.append(row)
    moe = []
    for case in spec.get("moe") or ():
        from labkit.plan.fake_moe import shard_bytes as moe_bytes
        t = time.perf_counter()
        row = moe_bytes(*case)
        row["seconds"] = time.perf_counter() - t
        moe.append(row)
    step = None
    if spec.get("step"):
        t = time.perf_counter()
        step = tracked_step(**spec["step"])
        step["seconds"] = time.perf_counter() - t
    print(json.dumps({"rows": rows, "step": step, "moe": moe}))


if __name__ == "__main__":
    _main(sys.argv[1])
