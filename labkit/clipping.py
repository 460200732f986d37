"""Gradient clipping when the gradients are spread over data, tensor and pipeline parallelism.

    norm = global_grad_norm(shards, weights, groups)       # the norm one process would compute
    cluster.run(clip_parity, dp=2, tp=2)                   # the right norm and the wrong ones

Clipping scales every gradient by max_norm / ||g||, where ||g|| is the norm of ALL the model's
gradients. On a 3-D layout no rank holds them all:
- DP with ZeRO-2/3 or FSDP: each data-parallel rank holds a different shard of the (averaged)
  gradient: the squares are summed over the DP group. (Plain DDP keeps whole copies: no sum.)
- TP: a split weight (column / row parallel) is in pieces on the TP ranks: summed over TP. A
  replicated one (layer norms, the row-parallel bias) is the same on every TP rank: counted on
  one TP rank only (Megatron-LM's `param_is_not_tensor_parallel_duplicate`).
- PP: each stage holds different layers: summed over the PP group.
One all-reduce of one number per dimension. Leave one out and the norm is wrong by the part it
misses; count the replicas on each TP rank and they weigh t times.
"""
import torch
import torch.distributed as dist
import torch.nn as nn

from labkit.i18n import tr_fig

WRONG = ("no DP sum", "no TP sum", "no PP sum", "replicas counted t times")


def global_grad_norm(shard: torch.Tensor, weight: torch.Tensor, groups: dict, skip=()) -> torch.Tensor:
    """sqrt of sum(shard^2 * weight) summed over the 'dp', 'tp' and 'pp' groups (skip: names
    of groups not to sum over, to see a wrong norm). `weight` is 1 where this rank counts an
    element and 0 where another TP rank counts the same replicated element."""
    sq = (shard.double() ** 2 * weight).sum()
    for d in ("dp", "tp", "pp"):
        if d not in skip and groups.get(d) is not None:
            dist.all_reduce(sq, group=groups[d])
    return sq.sqrt()


def _mark_replicated(tp_stage: nn.Module) -> None:
    """Flag the parameters every TP rank holds whole (layer norms, row-parallel biases)."""
    from labkit.tp.layers import ColumnParallelLinear, RowParallelLinear
    split = set()
    for m in tp_stage.modules():
        if isinstance(m, ColumnParallelLinear):
            split |= {id(p) for p in m.parameters()}
        elif isinstance(m, RowParallelLinear):
            split.add(id(m.weight))
    for p in tp_stage.parameters():
        p.tp_replicated = id(p) not in split


def _flat(tensors, n):
    flat = torch.cat([t.reshape(-1) for t in tensors])
    return torch.cat([flat, flat.new_zeros(-len(flat) % n)])        # padded to a multiple of n


def _run_stage(stage, x, w, layout, me, dp):
    """One micro-batch through this rank's pipeline stage; the last stage makes the loss."""
    c = layout.coords(me)
    if c.pp > 0:
        x = torch.empty_like(x)
        dist.recv(x, src=layout.rank_of(c.dp, c.pp - 1, c.tp))
        x.requires_grad_()
    y = stage(x)
    if c.pp == layout.pp - 1:
        ((y * w).sum() / dp).backward()          # DP ranks average: the mean of their grads
    else:
        dist.send(y.detach().contiguous(), dst=layout.rank_of(c.dp, c.pp + 1, c.tp))
        g = torch.empty_like(y)
        dist.recv(g, src=layout.rank_of(c.dp, c.pp + 1, c.tp))
        y.backward(g)
    if c.pp > 0:
        dist.send(x.grad.contiguous(), dst=layout.rank_of(c.dp, c.pp - 1, c.tp))


def clip_parity(dp=2, pp=1, tp=2, n_layer=2, n_embd=32, n_head=4, b=4, s=8) -> dict:
    """One backward on a dp x pp x tp layout with ZeRO-2 gradient shards (reduce-scatter over
    DP), then the norm computed right and with each reduction missing, against one process on
    the whole batch; and this rank's shard after clipping to half the norm, against the one
    process's clipped gradient."""
    from labkit.comm.ring import ring_reduce_scatter
    from labkit.parallel_dims import Layout, build_groups
    from labkit.tp.blocks import full_grad_slice, parallelize_blocks
    from labkit.tp.parity import batch, reference_blocks
    layout = Layout(dp=dp, pp=pp, tp=tp, gpus_per_node=tp)
    groups, me = build_groups(layout), dist.get_rank()
    c = layout.coords(me)
    ref = reference_blocks(n_layer, n_embd, n_head)
    x, w = batch(b, s, n_embd)
    ((ref(x) * w).sum() / dp).backward()          # one process: the whole batch, same loss
    per = n_layer // pp
    mine = list(range(c.pp * per, (c.pp + 1) * per))
    stage = parallelize_blocks([ref[i] for i in mine], groups["tp"])
    _mark_replicated(stage)
    rows = slice(c.dp * b // dp, (c.dp + 1) * b // dp)
    _run_stage(stage, x[rows].clone(), w[rows], layout, me, dp)
    names = [n for n, _ in stage.named_parameters()]
    params = [p for _, p in stage.named_parameters()]
    full = dict(ref.named_parameters())

    def ref_piece(name):      # "0.attn.qkv.weight" on stage p -> block mine[0] of the reference
        i, rest = name.split(".", 1)
        return full_grad_slice(stage, name, full[f"{mine[int(i)]}.{rest.replace('attn.', '').replace('mlp.', '')}"].grad)

    grads = _flat([p.grad for p in params], dp)
    first_tp = c.tp == 0
    weight = _flat([torch.full_like(p, float(first_tp or not p.tp_replicated)) for p in params], dp)
    k = len(grads) // dp
    shard = ring_reduce_scatter(grads, groups["dp"]).clone() if dp > 1 else grads
    mine_w = weight[c.dp * k:(c.dp + 1) * k]
    norms = {"one process": sum(p.grad.double().pow(2).sum() for p in ref.parameters()).sqrt().item(),
             "right": global_grad_norm(shard, mine_w, groups).item(),
             "no DP sum": global_grad_norm(shard, mine_w, groups, skip=("dp",)).item(),
             "no TP sum": global_grad_norm(shard, mine_w, groups, skip=("tp",)).item(),
             "no PP sum": global_grad_norm(shard, mine_w, groups, skip=("pp",)).item(),
             "replicas counted t times": global_grad_norm(shard, torch.ones_like(mine_w), groups).item()}
    max_norm = norms["one process"] / 2
    torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    shard = shard * min(1.0, max_norm / (norms["right"] + 1e-6))
    want = _flat([ref_piece(n) for n in names], dp)[c.dp * k:(c.dp + 1) * k]
    return {"rank": me, "coords": tuple(c), "norms": norms,
            "clipped shard diff": (shard - want).abs().max().item(),
            "TP-replicated elements": int(sum(p.numel() for p in params if p.tp_replicated)) if tp > 1 else 0,
            "elements": int(sum(p.numel() for p in params))}


def norms_figure(results: dict, title: str = ""):
    """One panel per layout ({name: a rank's clip_parity result}), one x scale: each norm that
    rank computed, green where it equals one process's (dashed line), red where it does not."""
    import matplotlib.pyplot as plt
    names = ["right", *WRONG]
    fig, axes = plt.subplots(1, len(results), figsize=(3.3 * len(results), 3.0), sharex=True, sharey=True)
    for ax, (layout, res) in zip(list(getattr(axes, "flat", [axes])), results.items()):
        norms, want = res["norms"], res["norms"]["one process"]
        vals = [norms[n] for n in names][::-1]
        ax.barh([tr_fig(n) for n in names[::-1]], vals, color=["tab:green" if abs(v / want - 1) < 1e-6 else "tab:red" for v in vals])
        ax.axvline(want, ls="--", color="k")
        ax.set_title(tr_fig("{layout} (rank {rank})", layout=layout, rank=res["rank"]))
        ax.set_xlabel(tr_fig("gradient norm"))
    fig.suptitle(title or tr_fig("the global gradient norm, right and with one piece missing "
                                 "(dashed: one process; green: equal to it, red: not)"))
    fig.tight_layout()
    return fig
