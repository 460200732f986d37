"""Detectors for the notes' pitfalls (高频踩坑), notebook 11. Pure: each takes what the ranks
measured (gathered into the notebook) and returns (ok, one line saying what is wrong and what to
do). No torch here: the ranks gather the numbers, these functions judge them.

    devices_distinct({0: "cuda:0", 1: "cuda:0"})     # forgotten set_device
    validation_shards([[0, 2, 4], [1, 3, 0]], 5)      # padding / shuffling in evaluation
    batchnorm_in_sync([[0.1, 0.2], [0.3, 0.2]])       # BatchNorm statistics per rank
    lr_rule(lr, base_lr, base_batch, global_batch)    # learning rate against the scaling rules
    seeds_ok(weights, sampler_seeds, dropout_masks)   # what must match, what may differ
    pipeline_balance([0.01, 0.03, 0.01, 0.01])        # one slow stage paces the pipeline
"""
import math

__all__ = ["devices_distinct", "validation_shards", "batchnorm_in_sync", "lr_rule", "seeds_ok",
           "pipeline_balance"]


def devices_distinct(device_map: dict, local_ranks: dict = None):
    """device_map: rank -> device string each rank's new tensors land on ("cuda:0", "cpu", ...);
    local_ranks: rank -> LOCAL_RANK, when known. Several ranks on one GPU, or a rank whose GPU is
    not its LOCAL_RANK, is the forgotten `torch.cuda.set_device(local_rank)`: the ranks crowd
    GPU 0 (memory, compute) while the other GPUs idle. CPU ranks share the CPU by design."""
    by_dev = {}
    for r, d in sorted(device_map.items()):
        by_dev.setdefault(str(d), []).append(r)
    crowded = {d: rs for d, rs in by_dev.items() if len(rs) > 1 and d.startswith("cuda")}
    if crowded:
        d, rs = sorted(crowded.items(), key=lambda kv: -len(kv[1]))[0]
        return False, (f"ranks {', '.join(map(str, rs))} all use {d}: call "
                       f"torch.cuda.set_device(local_rank) before creating tensors or the process group")
    wrong = [r for r, d in sorted(device_map.items()) if local_ranks and str(d).startswith("cuda:")
             and int(str(d).split(":")[1]) != local_ranks.get(r, int(str(d).split(":")[1]))]
    if wrong:
        r = wrong[0]
        return False, (f"rank {r} uses {device_map[r]} but its LOCAL_RANK is {local_ranks[r]}: call "
                       "torch.cuda.set_device(local_rank) before creating tensors or the process group")
    return True, f"{len(device_map)} ranks, each on its own device or on the CPU"


def validation_shards(shards: list, n_items: int, again: list = None):
    """shards: each rank's validation indices; again: the same taken a second time (another
    epoch). Flags padding (an item evaluated more than once: DistributedSampler repeats indices
    when n_items does not divide), lost items, and an order that changes between evaluations
    (shuffle=True: harmless for the mean, but per-item results no longer line up)."""
    seen = [i for s in shards for i in s]
    twice = sorted({i for i in seen if seen.count(i) > 1})
    missing = sorted(set(range(n_items)) - set(seen))
    problems = []
    if twice:
        problems.append(f"{len(twice)} item{'s' * (len(twice) > 1)} evaluated twice (padding: {twice[:5]}); "
                        "mask the padded positions or use drop_last only for training")
    if missing:
        problems.append(f"{len(missing)} item{'s' * (len(missing) > 1)} never evaluated ({missing[:5]})")
    if again is not None and [list(s) for s in again] != [list(s) for s in shards]:
        problems.append("the order changes between evaluations: use shuffle=False for validation")
    if problems:
        return False, "; ".join(problems)
    return True, f"{n_items} items, each evaluated once, in the same order every time"


def batchnorm_in_sync(per_rank: list, tol: float = 1e-5):
    """per_rank: each rank's BatchNorm running statistics, flattened (means and variances).
    Plain BatchNorm normalises with the local batch, so ranks drift apart; SyncBatchNorm (or
    statistics all-reduced by hand) keeps them equal."""
    ref = per_rank[0]
    gap = max((abs(a - b) for row in per_rank[1:] for a, b in zip(row, ref)), default=0.0)
    if any(len(row) != len(ref) for row in per_rank):
        return False, "ranks hold BatchNorm statistics of different sizes"
    if gap > tol:
        return False, (f"BatchNorm statistics differ across ranks by up to {gap:.3g}: each rank "
                       "normalised with its own batch; use SyncBatchNorm (GPU) or all-reduce the "
                       "batch statistics, or LayerNorm")
    return True, f"BatchNorm statistics equal on {len(per_rank)} ranks (within {tol:g})"


def lr_rule(lr: float, base_lr: float, base_batch: int, global_batch: int, rtol: float = 0.02):
    """Which scaling rule `lr` follows for `global_batch`, given `base_lr` tuned at `base_batch`.
    Not scaled is slow (each step averages more samples at the same step size); above the
    linear rule is what diverges (Goyal et al. 2017, with warm-up for the linear rule)."""
    k = global_batch / base_batch
    rules = {"linear": base_lr * k, "sqrt": base_lr * math.sqrt(k), "none": base_lr}
    name = next((r for r, v in rules.items() if abs(lr - v) <= rtol * v), None)
    if k == 1 or name in ("linear", "sqrt"):
        return True, f"lr {lr:g} follows the {name or 'same-batch'} rule for a global batch {k:g}x the base"
    if lr > rules["linear"] * (1 + rtol):
        return False, (f"lr {lr:g} is above the linear rule ({rules['linear']:g}) for a global batch "
                       f"{k:g}x the base: expect divergence; use at most the linear rule, with warm-up")
    return False, (f"lr {lr:g} is not scaled for a global batch {k:g}x the base ({base_batch} -> "
                   f"{global_batch}): training is slow; linear rule {rules['linear']:g}, "
                   f"sqrt rule {rules['sqrt']:g}")


def seeds_ok(weights: list, sampler_seeds: list, dropout_masks: list, tp_replicated_masks: list = None):
    """Per rank: a hash of the initial weights, the sampler seed, a hash of one dropout mask.
    Weights and sampler seeds must match across data-parallel ranks (same model; shards that
    tile the data set): a problem otherwise. Dropout masks across data-parallel ranks: different
    is the usual choice, identical is no bug (each rank's mask falls on different samples;
    Megatron-LM seeds every data-parallel rank alike by default): a note, still ok.
    `tp_replicated_masks`: the masks that the ranks of one tensor-parallel group drew on an
    activation they all hold in full (replicated, outside the sharded region): these must be
    identical, or the copies diverge; only inside the sharded (model-parallel) region does each
    rank draw its own (Megatron's `model_parallel_cuda_manual_seed`, `CudaRNGStatesTracker`)."""
    problems, notes = [], []
    if len(set(weights)) > 1:
        problems.append(f"initial weights differ across ranks ({len(set(weights))} versions): seed "
                        "the model identically or broadcast rank 0's weights (DDP does)")
    if len(set(sampler_seeds)) > 1:
        problems.append(f"sampler seeds differ ({sorted(set(sampler_seeds))}): shards overlap and "
                        "miss items; give DistributedSampler the same seed on every rank")
    if tp_replicated_masks is not None and len(set(tp_replicated_masks)) > 1:
        problems.append(f"dropout masks on a replicated activation differ inside the tensor-parallel "
                        f"group ({len(set(tp_replicated_masks))} versions): the ranks' copies of it "
                        "diverge; use the same seed on the group for replicated regions, and a "
                        "per-rank generator only inside the sharded region")
    if len(dropout_masks) > 1 and len(set(dropout_masks)) == 1:
        notes.append("note: dropout masks are identical on every data-parallel rank; not a bug (each "
                     "mask falls on different samples), though seeding dropout with the rank "
                     "(seed + rank) is the usual choice")
    if problems:
        return False, "; ".join(problems + notes)
    what = "weights and sampler seeds match on every rank"
    if tp_replicated_masks is not None:
        what += ", the tensor-parallel group's masks on replicated activations are identical"
    if notes:
        return True, what + "; " + notes[0]
    return True, what + ", dropout masks differ across data-parallel ranks"


def pipeline_balance(stage_seconds: list, tol: float = 0.2):
    """Seconds per micro-batch of each pipeline stage. The slowest stage paces all: the others
    idle (max - own) per micro-batch. Flags a slowest stage more than `tol` above the mean."""
    worst = max(stage_seconds)
    mean = sum(stage_seconds) / len(stage_seconds)
    idle = sum(worst - s for s in stage_seconds) / (worst * len(stage_seconds))
    s = stage_seconds.index(worst)
    if worst > (1 + tol) * mean:
        return False, (f"stage {s} takes {worst / mean:.2f}x the mean stage time; the others idle "
                       f"{idle:.0%} of the time: move layers off stage {s}")
    return True, f"stages within {tol:.0%} of the mean (idle {idle:.0%})"
