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

from labkit.i18n import tr

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
        return False, tr("ranks {ranks} all use {device}: call torch.cuda.set_device(local_rank) before "
                         "creating tensors or the process group", ranks=", ".join(map(str, rs)), device=d)
    wrong = [r for r, d in sorted(device_map.items()) if local_ranks and str(d).startswith("cuda:")
             and int(str(d).split(":")[1]) != local_ranks.get(r, int(str(d).split(":")[1]))]
    if wrong:
        r = wrong[0]
        return False, tr("rank {rank} uses {device} but its LOCAL_RANK is {local}: call "
                         "torch.cuda.set_device(local_rank) before creating tensors or the process "
                         "group", rank=r, device=device_map[r], local=local_ranks[r])
    return True, tr("{n} ranks, each on its own device or on the CPU", n=len(device_map))


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
        problems.append((tr("{k} items evaluated twice (padding: {first}); mask the padded positions "
                            "or use drop_last only for training", k=len(twice), first=twice[:5])
                         if len(twice) > 1 else
                         tr("{k} item evaluated twice (padding: {first}); mask the padded positions "
                            "or use drop_last only for training", k=len(twice), first=twice[:5])))
    if missing:
        problems.append(tr("{k} items never evaluated ({first})", k=len(missing), first=missing[:5])
                        if len(missing) > 1 else
                        tr("{k} item never evaluated ({first})", k=len(missing), first=missing[:5]))
    if again is not None and [list(s) for s in again] != [list(s) for s in shards]:
        problems.append(tr("the order changes between evaluations: use shuffle=False for validation"))
    if problems:
        return False, tr("; ").join(problems)
    return True, tr("{n} items, each evaluated once, in the same order every time", n=n_items)


def batchnorm_in_sync(per_rank: list, tol: float = 1e-5):
    """per_rank: each rank's BatchNorm running statistics, flattened (means and variances).
    Plain BatchNorm normalises with the local batch, so ranks drift apart; SyncBatchNorm (or
    statistics all-reduced by hand) keeps them equal."""
    ref = per_rank[0]
    gap = max((abs(a - b) for row in per_rank[1:] for a, b in zip(row, ref)), default=0.0)
    if any(len(row) != len(ref) for row in per_rank):
        return False, tr("ranks hold BatchNorm statistics of different sizes")
    if gap > tol:
        return False, tr("BatchNorm statistics differ across ranks by up to {gap:.3g}: each rank "
                         "normalised with its own batch; use SyncBatchNorm (GPU) or all-reduce the "
                         "batch statistics, or LayerNorm", gap=gap)
    return True, tr("BatchNorm statistics equal on {n} ranks (within {tol:g})", n=len(per_rank), tol=tol)


def lr_rule(lr: float, base_lr: float, base_batch: int, global_batch: int, rtol: float = 0.02):
    """Which scaling rule `lr` follows for `global_batch`, given `base_lr` tuned at `base_batch`.
    Not scaled is slow (each step averages more samples at the same step size); above the
    linear rule is what diverges (Goyal et al. 2017, with warm-up for the linear rule)."""
    k = global_batch / base_batch
    rules = {"linear": base_lr * k, "sqrt": base_lr * math.sqrt(k), "none": base_lr}
    name = next((r for r, v in rules.items() if abs(lr - v) <= rtol * v), None)
    if k == 1 or name in ("linear", "sqrt"):
        return True, tr("lr {lr:g} follows the {rule} rule for a global batch {k:g}x the base", lr=lr,
                        rule=name or "same-batch", k=k)
    if lr > rules["linear"] * (1 + rtol):
        return False, tr("lr {lr:g} is above the linear rule ({linear:g}) for a global batch {k:g}x "
                         "the base: expect divergence; use at most the linear rule, with warm-up",
                         lr=lr, linear=rules["linear"], k=k)
    return False, tr("lr {lr:g} is not scaled for a global batch {k:g}x the base ({base} -> {batch}): "
                     "training is slow; linear rule {linear:g}, sqrt rule {sqrt:g}", lr=lr, k=k,
                     base=base_batch, batch=global_batch, linear=rules["linear"], sqrt=rules["sqrt"])


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
        problems.append(tr("initial weights differ across ranks ({k} versions): seed the model "
                           "identically or broadcast rank 0's weights (DDP does)", k=len(set(weights))))
    if len(set(sampler_seeds)) > 1:
        problems.append(tr("sampler seeds differ ({seeds}): shards overlap and miss items; give "
                           "DistributedSampler the same seed on every rank", seeds=sorted(set(sampler_seeds))))
    if tp_replicated_masks is not None and len(set(tp_replicated_masks)) > 1:
        problems.append(tr("dropout masks on a replicated activation differ inside the tensor-parallel "
                           "group ({k} versions): the ranks' copies of it diverge; use the same seed on "
                           "the group for replicated regions, and a per-rank generator only inside the "
                           "sharded region", k=len(set(tp_replicated_masks))))
    if len(dropout_masks) > 1 and len(set(dropout_masks)) == 1:
        notes.append(tr("note: dropout masks are identical on every data-parallel rank; not a bug (each "
                        "mask falls on different samples), though seeding dropout with the rank "
                        "(seed + rank) is the usual choice"))
    if problems:
        return False, tr("; ").join(problems + notes)
    what = tr("weights and sampler seeds match on every rank")
    if tp_replicated_masks is not None:
        what += tr(", the tensor-parallel group's masks on replicated activations are identical")
    if notes:
        return True, what + tr("; ") + notes[0]
    return True, what + tr(", dropout masks differ across data-parallel ranks")


def pipeline_balance(stage_seconds: list, tol: float = 0.2):
    """Seconds per micro-batch of each pipeline stage. The slowest stage paces all: the others
    idle (max - own) per micro-batch. Flags a slowest stage more than `tol` above the mean."""
    worst = max(stage_seconds)
    mean = sum(stage_seconds) / len(stage_seconds)
    idle = sum(worst - s for s in stage_seconds) / (worst * len(stage_seconds))
    s = stage_seconds.index(worst)
    if worst > (1 + tol) * mean:
        return False, tr("stage {s} takes {x:.2f}x the mean stage time; the others idle {idle:.0%} of "
                         "the time: move layers off stage {s}", s=s, x=worst / mean, idle=idle)
    return True, tr("stages within {tol:.0%} of the mean (idle {idle:.0%})", tol=tol, idle=idle)
