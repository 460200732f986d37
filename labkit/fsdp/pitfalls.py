"""Two FSDP pitfalls from the notes, shown failing and then fixed, on a rank (layer 3).

- `param_groups(use_orig_params)`: FSDP1 with use_orig_params=False flattens each unit's
  parameters into one FlatParameter, so an optimizer built from `named_parameters()` with the
  usual rule "no weight decay for biases and norms" finds no bias and no norm: every parameter
  decays, silently. With use_orig_params=True (and always in FSDP2, whose parameters are the
  original ones as DTensor shards) the rule works.
- `clip_norms()`: with sharded gradients each rank holds part of each gradient, so a norm
  computed from the local shards alone is each rank's own, smaller number; clipping with it
  scales the ranks differently. The right norm sums the squares over all ranks
  (`torch.nn.utils.clip_grad_norm_` on FSDP2's DTensor gradients does; FSDP1 has
  `FullyShardedDataParallel.clip_grad_norm_`).
"""
import copy
import warnings

import torch
import torch.distributed as dist

NO_DECAY = ("bias", "ln", "norm")


def decay_groups(named_params, weight_decay: float = 0.1) -> list:
    """The usual AdamW groups: weight decay for matrices, none for biases and norms (by name)."""
    decay, no_decay = [], []
    for name, p in named_params:
        if p.requires_grad:
            (no_decay if any(k in name for k in NO_DECAY) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def param_groups(use_orig_params: bool, fsdp2: bool = False) -> dict:
    """Wrap TinyGPT with FSDP1 (the notes' configuration, on CPU) or FSDP2, build the decay
    groups by name, and count elements in each group. One process: the truth."""
    from labkit.fsdp.runs import tiny_gpt
    model, _ = tiny_gpt()
    truth = decay_groups(model.named_parameters())
    if fsdp2:
        from labkit.fsdp.apply import shard
        shard(model, wrap="block", log=False)
        names = "FSDP2"
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)       # FSDP1 is deprecated in favour of FSDP2
            model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD,
                         device_id=torch.device("cpu"), use_orig_params=use_orig_params)
        names = f"FSDP1 use_orig_params={use_orig_params}"
    groups = decay_groups(model.named_parameters())
    return {"how": names, "tensors_per_group": [len(g["params"]) for g in groups],
            "tensors_expected": [len(g["params"]) for g in truth],
            "first_names": [name for name, _ in list(model.named_parameters())[:3]]}


def clip_norms(max_norm: float = 0.05, frozen: tuple = ()) -> dict:
    """One FSDP2 backward on this rank's slice; the gradient norm three ways: from the local
    shards alone (wrong), over all ranks (clip_grad_norm_ on DTensors), and one process.
    `frozen`: names of parameters to freeze first (requires_grad=False, so no gradient: they
    count in no norm)."""
    from labkit.fsdp.apply import shard
    from labkit.fsdp.runs import tiny_gpt
    from labkit.toy_models import lm_loss
    n, r = dist.get_world_size(), dist.get_rank()
    ref, batch = tiny_gpt()
    params = dict(ref.named_parameters())
    for name in frozen:
        if name not in params:
            raise KeyError(f"clip_norms: no parameter {name!r} to freeze (rank {r}); "
                           f"TinyGPT's are e.g. {', '.join(list(params)[:4])}")
        params[name].requires_grad_(False)
    model = shard(copy.deepcopy(ref), wrap="block", log=False)
    x, y = batch(n, 4)
    lm_loss(model(x[4 * r:4 * r + 4]), y[4 * r:4 * r + 4]).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    local = torch.sqrt(sum(g.to_local().pow(2).sum() for g in grads)).item()
    right = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).full_tensor().item()
    lm_loss(ref(x), y).backward()
    one = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm).item()
    return {"rank": r, "local_shard_norm": local, "global_norm": right, "one_process_norm": one,
            "with_grad": len(grads)}
