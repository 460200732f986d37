"""Gradient clipping over a parallel grid against one process, run on every rank (4 ranks):
the norm computed right and with each reduction missing, and the clipped gradients.

    cluster.run(clip_parity, dp=2, tp=2)        # DP (ZeRO-2 shards) x PP x TP
    cluster.run(clip_parity_ep, cp=2)           # experts over EP inside DP, the sequence over CP
    cluster.run(tied_parity)                    # the embedding tied across the first and last stage

The norm and the bounds the results are judged by are `labkit.nd.clipping`'s.
"""
import torch
import torch.distributed as dist
import torch.nn as nn

from labkit.i18n import tr
from labkit.nd.clipping import ep_bounds, global_grad_norm, parity_bounds, tied_bounds
from labkit.tp.layers import mark_replicated


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
    from labkit.nd.layout import Layout, build_groups
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
    mark_replicated(stage)
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
            "elements": int(sum(p.numel() for p in params)),
            "bounds": parity_bounds(norms["one process"], sum(p.numel() for p in ref.parameters()),
                                    n_layer, n_embd, n_head, b, s, dp)}


def _ep_groups(cp: int):
    """(ep, expert-dp, cp) groups of this rank on 4 ranks: EP groups {0,1} {2,3} (adjacent),
    experts replicated over {0,2} {1,3}; CP groups {0,1} {2,3} when cp = 2 (sequence split over
    the same pairs), else None. Built once per cluster (every rank calls new_group alike)."""
    from labkit.comm.groups import once
    n = dist.get_world_size()
    pairs, edps = once(("clipping.ep", n), lambda: (
        [dist.new_group([i, i + 1]) for i in range(0, n, 2)],
        [dist.new_group(list(range(j, n, 2))) for j in range(2)]))
    me = dist.get_rank()
    return pairs[me // 2], edps[me % 2], (pairs[me // 2] if cp == 2 else None)


class _Attention(nn.Module):
    """Causal self-attention with a residual (the dense part beside the experts); over a CP group
    its positions are this rank's zig-zag share and `labkit.cp.attention` runs the ring."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)

    def forward(self, x, cp_group=None):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        if cp_group is None:
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            from labkit.cp.api import attention
            a = attention(q, k, v, group=cp_group, causal=True, layout="zigzag")
        return x + self.proj(a.transpose(1, 2).reshape(b, s, h))


def clip_parity_ep(cp: int = 1, seq: int = 16, hidden: int = 16, heads: int = 2, experts: int = 4,
                   k: int = 2) -> dict:
    """4 ranks: attention then a mixture-of-experts layer, experts sharded over EP = 2 (inside
    expert data parallelism 2), the sequence split over CP = cp (zig-zag) with DP = 4 / cp. One
    backward, the dense gradients (attention, router) all-reduced over all 4 ranks (DP x CP), the
    experts' over their replicas; then the norm right and wrong against one process on the
    whole batch, and this rank's gradients after clipping to half of it."""
    from labkit.cp.shard import shard_sequence
    from labkit.moe.parallel import expert_parallel, reduce_gradients
    from labkit.moe.parity import build
    world, me = dist.get_world_size(), dist.get_rank()
    if world != 4 or cp not in (1, 2):
        raise ValueError(tr("clip_parity_ep on rank {rank}: it runs on 4 ranks with cp = 1 or 2, not {n} "
                            "ranks and cp = {cp}: start labkit.Cluster(4)", rank=me, n=world, cp=cp))
    ep_group, edp_group, cp_group = _ep_groups(cp)
    dp = world // cp
    torch.manual_seed(0)
    attn_ref = _Attention(hidden, heads)
    moe_ref = build(hidden=hidden, ffn_hidden=2 * hidden, experts=experts, k=k)   # dropless
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(dp, seq, hidden, generator=g), torch.randn(dp, seq, hidden, generator=g)
    xr = x.clone().requires_grad_()
    h_ref = attn_ref(xr)
    h_ref.retain_grad()
    y = moe_ref(h_ref.reshape(-1, hidden))
    (y * w.reshape(-1, hidden)).sum().backward()            # one process: every token, summed
    ref = [*attn_ref.parameters(), *moe_ref.parameters()]
    for p in ref:
        p.grad /= world                                      # the mean over the 4 ranks' losses
    largest = max(t.abs().max().item() for t in [x, w, h_ref, y, xr.grad, h_ref.grad] + [p.grad for p in ref])

    torch.manual_seed(0)
    attn = _Attention(hidden, heads)
    moe = expert_parallel(build(hidden=hidden, ffn_hidden=2 * hidden, experts=experts, k=k), ep_group)
    row = me // cp
    xs, ws = x[row:row + 1], w[row:row + 1]
    if cp_group is not None:
        xs, ws = (shard_sequence(t, 1, group=cp_group, layout="zigzag") for t in (xs, ws))
    ((moe(attn(xs, cp_group).reshape(-1, hidden)) * ws.reshape(-1, hidden)).sum()).backward()
    for p in attn.parameters():                              # DP x CP: all 4 ranks, averaged
        dist.all_reduce(p.grad)
        p.grad /= world
    reduce_gradients(moe, world=None, dp_group=edp_group)    # router: all 4; experts: replicas
    dense = [*attn.parameters(), moe.router.weight]
    mine = list(range(moe.first_expert, moe.first_expert + len(moe.experts)))
    want = [*attn_ref.parameters(), moe_ref.router.weight,
            *(p for e in mine for p in moe_ref.experts[e].parameters())]
    got = [*dense, *moe.experts.parameters()]
    first_ep = dist.get_rank(ep_group) == 0
    grads = torch.cat([p.grad.reshape(-1) for p in got])
    weight = torch.cat([torch.full((p.numel(),), 1.0 if (first_ep or i >= len(dense)) else 0.0)
                        for i, p in enumerate(got)])
    groups = {"ep": ep_group, "cp": cp_group}
    right = global_grad_norm(grads, weight, groups)
    grad_diff = max((p.grad - q.grad).abs().max().item() for p, q in zip(got, want))
    dense_norm = sum(q.grad.double().pow(2).sum() for q in want[:len(dense)]).sqrt().item()
    norms = {"one process": sum(p.grad.double().pow(2).sum() for p in ref).sqrt().item(),
             "right": right.item(),
             "no EP sum": global_grad_norm(grads, weight, groups, skip=("ep",)).item(),
             "dense counted on every EP rank": global_grad_norm(grads, torch.ones_like(weight), groups).item()}
    if cp_group is not None:
        sq = right.pow(2)                                    # the wrong guess: add the CP replicas
        dist.all_reduce(sq, group=cp_group)
        norms["summed over CP"] = sq.sqrt().item()
    max_norm = norms["one process"] / 2
    torch.nn.utils.clip_grad_norm_(ref, max_norm)
    scale = min(1.0, max_norm / (norms["right"] + 1e-6))
    diff = max((p.grad * scale - q.grad).abs().max().item() for p, q in zip(got, want))
    return {"rank": me, "cp": cp, "norms": norms, "grad diff": grad_diff, "clipped grad diff": diff,
            "dense norm": dense_norm, "largest value": largest,
            "expert elements": int(sum(p.numel() for p in moe.experts.parameters())),
            "dense elements": int(sum(p.numel() for p in dense)),
            "bounds": ep_bounds(norms["one process"], sum(p.numel() for p in ref) + sum(p.numel() for p in dense),
                                largest, cp, seq, hidden, heads, experts, k, world)}


def tied_parity(vocab: int = 24, hidden: int = 16, b: int = 4, s: int = 6) -> dict:
    """4 ranks as DP 2 x PP 2 (pipelines {0,1} and {2,3}): a language model whose input embedding
    (first stage) and output layer (last stage) share one weight E, as GPT-2's. Each stage holds a
    copy of E; after backward the copies' gradients are summed over the embedding group (the
    first and last stage of a pipeline), then everything is averaged over DP. The norm: squares
    summed over PP, E counted on the first stage only (Megatron's `param_is_not_shared`)."""
    world, me = dist.get_world_size(), dist.get_rank()
    if world != 4:
        raise ValueError(tr("tied_parity on rank {rank}: it runs on 4 ranks (DP 2 x PP 2), not {n}: "
                            "start labkit.Cluster(4)", rank=me, n=world))
    from labkit.comm.groups import once
    pipes, dps = once("clipping.tied", lambda: ([dist.new_group([0, 1]), dist.new_group([2, 3])],
                                                [dist.new_group([0, 2]), dist.new_group([1, 3])]))
    pp_group, dp_group, stage, d = pipes[me // 2], dps[me % 2], me % 2, me // 2
    torch.manual_seed(0)
    emb, l0, l1 = nn.Embedding(vocab, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
    g = torch.Generator().manual_seed(1)
    tok, tgt = torch.randint(vocab, (b, s), generator=g), torch.randint(vocab, (b, s), generator=g)

    def loss_of(h, t):
        return nn.functional.cross_entropy((h @ emb.weight.T).reshape(-1, vocab), t.reshape(-1), reduction="sum")
    ref = {"E": emb.weight, "l0": l0.weight, "l0b": l0.bias, "l1": l1.weight, "l1b": l1.bias}
    h0 = torch.tanh(l0(emb(tok)))
    h0.retain_grad()
    (loss_of(l1(h0), tgt) / 2).backward()            # the mean of the 2 DP ranks' losses
    want = {n: p.grad.clone() for n, p in ref.items()}
    with torch.no_grad():                            # the largest value one process computes
        logits = l1(h0) @ emb.weight.T
    largest = max(t.abs().max().item() for t in [h0, h0.grad, logits, *want.values()])
    for p in ref.values():
        p.grad = None
    rows = slice(d * b // 2, (d + 1) * b // 2)
    if stage == 0:                                   # embedding, first linear; send activations
        h = torch.tanh(l0(emb(tok[rows])))
        dist.send(h.detach(), dst=me + 1)
        gh = torch.empty_like(h)
        dist.recv(gh, src=me + 1)
        h.backward(gh)
        mine = {"E": emb.weight, "l0": l0.weight, "l0b": l0.bias}
    else:                                            # second linear, output layer tied to E
        h = torch.empty(b // 2, s, hidden)
        dist.recv(h, src=me - 1)
        h.requires_grad_()
        loss_of(l1(h), tgt[rows]).backward()
        dist.send(h.grad, dst=me - 1)
        mine = {"E": emb.weight, "l1": l1.weight, "l1b": l1.bias}
    dist.all_reduce(emb.weight.grad, group=pp_group)  # the embedding group: the tied copies summed
    for p in mine.values():                          # DP: averaged over the 2 replicas
        dist.all_reduce(p.grad, group=dp_group)
        p.grad /= 2
    grads = torch.cat([p.grad.reshape(-1) for p in mine.values()])
    shared = torch.cat([torch.full((p.numel(),), float(n == "E" and stage == 1)) for n, p in mine.items()])
    groups = {"pp": pp_group}                        # DP: plain replicas, no sum
    norms = {"one process": sum(v.double().pow(2).sum() for v in want.values()).sqrt().item(),
             "right": global_grad_norm(grads, 1 - shared, groups).item(),
             "tied embedding counted twice": global_grad_norm(grads, torch.ones_like(shared), groups).item()}
    return {"rank": me, "stage": stage, "norms": norms,
            "grad diff": max((p.grad - want[n]).abs().max().item() for n, p in mine.items()),
            "tied norm": want["E"].double().norm().item(), "largest value": largest,
            "bounds": tied_bounds(norms["one process"], sum(v.numel() for v in want.values()) + want["E"].numel(),
                                  largest, vocab, hidden, b, s)}
