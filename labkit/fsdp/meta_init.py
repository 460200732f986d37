"""Build a model too big for one rank: on the meta device, shard, then initialise the shards (layer 3).

    r = cluster.run(labkit.fsdp.meta_init.meta_init)

The notes' recipe for FSDP2: construct under `torch.device("meta")` (shapes only, no storage),
`fully_shard` it (the DTensor parameters are meta shards), `model.to_empty(device=...)` (allocate
this rank's shards only, uninitialised), then initialise the shards in place: TinyGPT's own
`_init` (normal(0, 0.02) for matrices and embeddings, zeros for biases) and each LayerNorm's
`reset_parameters`. A MemTracker watches every storage the rank allocates from the first line to
the last: the peak is this rank's shards, never the full model.
"""
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn


def _init_shards(model: nn.Module) -> None:
    from labkit.toy_models import TinyGPT
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.reset_parameters()                       # ones / zeros, on each local shard
    model.apply(TinyGPT._init)


def meta_init(n_layer: int = 2, seed: int = 0, per_rank_seed: bool = False) -> dict:
    """Build, shard and initialise TinyGPT on this rank. Returns the CPU peak of the whole
    build (MemTracker; the meta device's 'bytes' are shapes without storage), this rank's shard
    bytes and the full model's; the largest difference from the same model initialised on one
    process with the same seed, by name; per-tensor mean and std; and whether two ranks drew the
    same numbers for their different shards (`repeated_shards`).

    Deterministic initialisers (zeros, ones) give exactly the one-process values. Random ones do
    not: one process draws every tensor in module order from one stream, while DTensor's random
    ops on a CPU mesh have no offset tracker (torch warns that they 'may not have complete
    support on cpu device mesh'): each rank draws its shard from its own generator, so with one
    seed on every rank equal-sized shards come out IDENTICAL (measured: repeated_shards), a
    silently correlated model. per_rank_seed=True seeds rank r with seed + r: distinct shards,
    the same distribution (mean 0, std 0.02), still not the one-process values. (On CUDA meshes
    torch's offset-based tracker is meant to make the two agree; not run here.) To reproduce a one-process init exactly, initialise on one process
    and load the full state dict (labkit.fsdp.checkpoint) instead."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from labkit.fsdp.apply import shard
    from labkit.toy_models import GPTConfig, TinyGPT
    r = dist.get_rank()
    cfg = GPTConfig(n_layer=n_layer, n_embd=64, n_head=4, vocab_size=67, block_size=16)
    tracker = MemTracker()
    with tracker:
        with torch.device("meta"):
            model = TinyGPT(cfg)
        meta_bytes = sum(p.untyped_storage().nbytes() for p in model.parameters() if not p.is_meta)
        shard(model, wrap="block", log=False)
        model.to_empty(device="cpu")
        torch.manual_seed(seed + (r if per_rank_seed else 0))
        with warnings.catch_warnings():      # "DTensor random operators may not have complete support on cpu"
            warnings.simplefilter("ignore", UserWarning)
            _init_shards(model)
    # the meta device's 'bytes' are shapes without storage: only the CPU's count
    peak_total = next(v["Total"] for k, v in tracker.get_tracker_snapshot("peak").items() if str(k) == "cpu")
    shard_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    # the same model built normally on one device with the same seed
    torch.manual_seed(seed)
    with torch.device("meta"):
        ref = TinyGPT(cfg)
    ref.to_empty(device="cpu")
    torch.manual_seed(seed)
    _init_shards(ref)
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    diffs = {k: (full[k] - v).abs().max().item() for k, v in ref.state_dict().items()}
    w = full["blocks.0.fc.weight"]          # 256 rows: equal shards on 2 and 4 ranks
    rows = w.shape[0] // dist.get_world_size()
    repeated = torch.equal(w[:rows], w[rows:2 * rows])
    stats = {k: (full[k].mean().item(), full[k].std().item() if full[k].numel() > 1 else 0.0)
             for k in full}
    return {"rank": r, "storage_on_meta": meta_bytes, "peak_bytes": peak_total,
            "shard_bytes": shard_bytes, "full_bytes": ref.num_params() * 4,
            "max_diff_by_name": diffs, "stats": stats,
            "repeated_shards": repeated, "tied": model.head.weight is model.tok.weight}
