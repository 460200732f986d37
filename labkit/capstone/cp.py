"""Context parallelism for the capstone's TinyGPT stages, applied from outside (module 12's
pieces): the sequence split over a CP group in the zig-zag layout, attention as a ring.

    use_cp(stage, cp_group)                  # every block's attention -> labkit.cp.attention ring
    x, y = shard(x, y, cp_group)             # tokens and targets: this rank's 2 of 2 x cp chunks
    loss = mean of this rank's tokens; gradients averaged over the DP x CP group (`dp_cp_groups`)

Three things must hold for a CP rank to compute its share of one process's step
(labkit.cp.train says the same for one block):
- tokens, targets and positions sharded with one permutation (`shard`; the first stage's
  position embedding reads the positions this rank holds: `ShardedPositions`),
- attention over the whole sequence: each rank's queries against every rank's keys, causal
  in global positions (the ring, zig-zag so each rank has equal causal work),
- each CP rank's loss the mean of its own tokens and the gradients averaged over DP x CP
  (torchtitan's dp_shard_cp; Megatron folds CP into its DP group): every CP rank then holds the
  same full gradient, a replica (never summed again in the clipping norm).
"""
import torch
import torch.nn as nn

LAYOUT = "zigzag"


def positions(seq: int, group) -> torch.Tensor:
    """The global positions this CP rank holds, in the zig-zag layout."""
    from labkit.cp import shard_sequence
    return shard_sequence(torch.arange(seq), 0, group=group, layout=LAYOUT)


def shard(x: torch.Tensor, y: torch.Tensor, group):
    """(this rank's tokens, its targets) of (batch, seq) tensors: one permutation for both."""
    from labkit.cp import shard_sequence
    return tuple(shard_sequence(t, 1, group=group, layout=LAYOUT) for t in (x, y))


class ShardedPositions(nn.Module):
    """A position embedding that looks up the global positions this CP rank holds: the stage
    asks for positions 0..s/cp-1 and gets rows positions[0..s/cp-1] of the same table (the
    parameter is the one-process model's, so its gradient lands on the right rows)."""

    def __init__(self, pos: nn.Embedding, held: torch.Tensor):
        super().__init__()
        self.pos = pos
        self.register_buffer("held", held, persistent=False)

    @property
    def weight(self):
        return self.pos.weight

    def forward(self, idx):
        return self.pos(self.held[idx])


class RingCore:
    """A block's attention core: labkit.cp.attention over the CP group (ring, zig-zag, causal)."""

    def __init__(self, group):
        self.group = group

    def __call__(self, q, k, v):
        from labkit.cp import attention
        return attention(q, k, v, group=self.group, causal=True, method="ring", layout=LAYOUT)


def use_cp(stage: nn.Module, group, seq: int) -> nn.Module:
    """Make a capstone Stage context parallel over `group`, in place (returns it)."""
    core = RingCore(group)
    for blk in stage.blocks:
        if hasattr(blk, "attn"):          # a labkit.tp.TPBlock
            blk.attn.core = core
        else:                             # a labkit.toy_models.Block
            blk.core = core
    if getattr(stage, "first", False):
        stage.pos = ShardedPositions(stage.pos, positions(seq, group))
    return stage


def dp_cp_groups(dp: int, pp: int, tp: int, cp: int) -> dict:
    """On every rank: {'dp', 'pp', 'tp', 'cp', 'dp_cp': this rank's group} and the Layout, from
    labkit.nd.layout.Layout(dp, pp, tp, cp) in the notes' order (TP fastest, CP beside it,
    then PP, DP outermost: torch.arange(world).view(dp, pp, cp, tp)). dp_cp: the ranks whose
    gradients are averaged (same pp and tp)."""
    import torch.distributed as dist
    from labkit.nd.layout import Layout, build_groups
    layout = Layout(dp=dp, pp=pp, tp=tp, cp=cp, gpus_per_node=max(8, dp * pp * tp * cp))
    g = build_groups(layout)
    me = dist.get_rank()
    for c_pp in range(pp):
        for c_tp in range(tp):
            ranks = [layout.rank_of(dp=d, pp=c_pp, tp=c_tp, cp=c) for d in range(dp) for c in range(cp)]
            pg = dist.new_group(ranks)
            if me in ranks:
                g["dp_cp"] = pg
    return layout, g


WRONG_CP = ("no CP reduction",)


class Recompute(nn.Module):
    """Activation checkpointing of one block (applied after TP and CP, before the data-parallel
    reduction: torchtitan's order): forward keeps only the block's input, backward runs the
    block again (its TP all-reduces and CP ring steps too) to get what it needs."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.blk = block

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.blk, x, use_reentrant=False)


def train(cfg=None, dp: int = 1, pp: int = 2, tp: int = 1, cp: int = 2, steps: int = 3,
          wrong: str = None, save_at: int = None, ckpt: str = None, resume: str = None,
          checkpointing: bool = False) -> dict:
    """labkit.capstone.trainer.train with context parallelism as a fourth dimension (call on
    every rank of dp x pp x tp x cp): the same pipeline step, clipping and SGD, the sequence
    sharded over CP, gradients averaged over DP x CP. `wrong` also takes "no CP reduction"
    (averaged over DP only). save_at / ckpt: a torch.distributed.checkpoint after that many
    steps; resume: start from one (written by any layout), at the step it was saved.
    checkpointing: every block recomputed in backward (`Recompute`)."""
    import torch.distributed as dist
    from labkit.capstone import checkpoint
    from labkit.capstone.data import global_batch
    from labkit.capstone.model import Config, build, stage_of, tp_replicated
    from labkit.capstone.trainer import WRONG, _pipeline, clipped_sgd, flat_grads
    from labkit.pipeline import ensure_valid, one_f_one_b
    cfg = cfg or Config()
    if wrong is not None and wrong not in WRONG + WRONG_CP:
        raise ValueError(f"wrong must be None or one of {WRONG + WRONG_CP}, got {wrong!r}")
    n = dp * pp * tp * cp
    if dist.get_world_size() != n:
        raise ValueError(f"dp({dp}) x pp({pp}) x tp({tp}) x cp({cp}) = {n} != world size "
                         f"({dist.get_world_size()}); start labkit.Cluster({n})")
    m = cfg.microbatches
    if cfg.batch % (dp * m):
        raise ValueError(f"batch {cfg.batch} does not split into dp({dp}) x microbatches({m})")
    if cfg.seq % (2 * cp):
        raise ValueError(f"seq {cfg.seq} does not split into 2 x cp({cp}) zig-zag chunks")
    layout, g = dp_cp_groups(dp, pp, tp, cp)
    rank = dist.get_rank()
    c = layout.coords(rank)
    model = build(cfg)
    start = checkpoint.load(model, resume) if resume else 0
    stage = stage_of(model, pp, c.pp, g["tp"] if tp > 1 else None)
    if cp > 1:
        use_cp(stage, g["cp"], cfg.seq)
    if checkpointing:
        stage.blocks = nn.ModuleList(Recompute(b) for b in stage.blocks)
    params = [p for p in stage.parameters() if p.requires_grad]
    replicated = tp_replicated(stage)
    count = torch.cat([torch.full((p.numel(),), float(c.tp == 0 or not replicated[id(p)]
                                                      or wrong == "clip norm summed over TP"),
                                  dtype=torch.float64) for p in params])
    peer = dict(dp=c.dp, tp=c.tp, cp=c.cp)
    prev = layout.rank_of(pp=c.pp - 1, **peer) if c.pp > 0 else None
    nxt = layout.rank_of(pp=c.pp + 1, **peer) if c.pp < pp - 1 else None
    s = ensure_valid(one_f_one_b(pp, m))
    rows = cfg.batch // dp
    shape = (rows // m, cfg.seq // cp, cfg.n_embd)
    red, red_n = g["dp_cp"], dp * cp                 # who averages the gradients
    if wrong == "no CP reduction":
        red, red_n = g["dp"], dp
    elif wrong == "no DP reduction":
        red, red_n = g.get("cp"), cp
    losses, norms = [], []
    for step in range(start, steps):
        x, y = global_batch(step, cfg.batch, cfg.seq)
        x, y = x[c.dp * rows:(c.dp + 1) * rows], y[c.dp * rows:(c.dp + 1) * rows]
        if cp > 1:
            x, y = shard(x, y, g["cp"])
        for p in params:
            p.grad = None
        loss = _pipeline(stage, s, c.pp, prev, nxt, x.chunk(m), y.chunk(m),
                         wrong != "loss not divided by micro-batches", shape)
        flat = flat_grads(params)
        if red_n > 1:                                 # the mean over DP x CP replicas
            dist.all_reduce(flat, group=red)
            flat /= red_n
        norm = clipped_sgd(params, flat, count, cfg, g)                      # CP: replicas
        t = torch.tensor([loss if stage.last else 0.0], dtype=torch.float64)
        dist.all_reduce(t, group=g["pp"])            # the last stage's loss, to every stage
        dist.all_reduce(t, group=g["dp_cp"])
        losses.append(float(t) / (dp * cp))
        norms.append(float(norm))
        if save_at is not None and step + 1 == save_at:
            checkpoint.save(stage, c.pp * (cfg.n_layer // pp), step + 1, ckpt,
                            g["tp"] if tp > 1 else None)
    return {"rank": rank, "coords": tuple(c), "losses": losses, "norms": norms, "start": start}


def loss_bounds(cfg, ref: dict, dp: int = 1, pp: int = 2, tp: int = 1, cp: int = 2) -> list:
    """labkit.capstone.loss_bounds with CP's extra reductions counted (chain_bound adds the
    lengths of a chain, and that bound's `dp` enters as the length of the batch's final sum):
    the DP x CP average (dp x cp terms) and, per layer, the ring's online-softmax merge of cp
    blocks in forward and in backward, and the ring's sum of the cp blocks' dK, dV (3 (cp + 1)
    per layer)."""
    from labkit.capstone.bounds import loss_bounds as dense
    extra = 3 * (cp + 1) * cfg.n_layer if cp > 1 else 0
    return dense(cfg, ref, dp=dp * cp + extra, pp=pp, tp=tp)
