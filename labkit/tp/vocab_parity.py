"""Run on every rank: the vocabulary-parallel embedding and loss against one device, torch's
`loss_parallel` beside them, and the bytes the loss keeps.

    cluster.run(vocab_parity)     # -> per rank: max |diff| of loss and every gradient
    cluster.run(vocab_memory)     # -> per rank: logits and saved-for-backward bytes, 3 ways
    cluster.run(torch_loss_parallel)   # -> torch's DTensor loss_parallel: diffs, collectives
"""
import torch

import labkit
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.tp.blocks import TPBlock
from labkit.tp.layers import ColumnParallelLinear
from labkit.tp.parity import reference_blocks
from labkit.tp.vocab import VocabParallelEmbedding, vocab_parallel_cross_entropy


# Derived, not tuned (labkit.numerics.chain_bound), as labkit.tp.parity.tolerance: the
# reductions along one forward and backward, each summed in another order on the ranks (split
# over the vocabulary, heads and columns, then the all-reduces) than on one device. SCALE (16,
# labkit.tp.parity's) bounds every value compared: tests/tp/test_tp_vocab.py checks it on one process
# (the LM's loss, logits and gradients reach 4.3; the random logits of the two loss checks 5.0).
def vocab_tolerance(vocab=64, n_embd=32, n_head=4, b=2, s=8) -> float:
    """The most `vocab_parity`'s differences may be on any CPU (fp32): the block's chain
    (labkit.tp.parity.reduction_lengths), then the head (n_embd), the log-sum-exp over the
    vocabulary (+ the target logit), the mean over b s tokens; backward the head's transpose
    (vocab) and the weight gradients' sums over b s tokens."""
    from labkit.numerics import chain_bound
    from labkit.tp.parity import SCALE, reduction_lengths
    return chain_bound(reduction_lengths(1, n_embd, n_head, b, s)
                       + [n_embd, vocab + 1, b * s, vocab, b * s], SCALE)


def loss_tolerance(tokens_: int, vocab: int) -> float:
    """The most a vocabulary-parallel cross-entropy (its loss or its logits' gradient) may differ
    from one device's: the log-sum-exp over `vocab` (+ the target logit) and the mean over
    `tokens_` positions (chain_bound, SCALE as above)."""
    from labkit.numerics import chain_bound
    from labkit.tp.parity import SCALE
    return chain_bound([vocab + 1, tokens_ + 1], SCALE)


def reference_lm(vocab=64, n_embd=32, n_head=4, seed=0) -> nn.ModuleDict:
    """Embedding -> one labkit Block -> output head (no bias), same weights on every rank."""
    blocks = reference_blocks(1, n_embd, n_head, seed)
    torch.manual_seed(seed + 1)
    return nn.ModuleDict({"emb": nn.Embedding(vocab, n_embd), "block": blocks[0],
                          "head": nn.Linear(n_embd, vocab, bias=False)})


def tokens(b=2, s=8, vocab=64, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (b, s), generator=g).to(labkit.device()), torch.randint(0, vocab, (b, s), generator=g).to(labkit.device())


def _reference(ref, ids, tgt):
    logits = ref["head"](ref["block"](ref["emb"](ids)))
    loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
    loss.backward()
    return loss, logits


def _parallel(ref, group):
    return nn.ModuleDict({"emb": VocabParallelEmbedding(ref["emb"], group),
                          "block": TPBlock(ref["block"], group),
                          "head": ColumnParallelLinear(ref["head"], group, name="vocabulary size")})


def vocab_parity(vocab=64, n_embd=32, n_head=4, b=2, s=8, group=None) -> dict:
    """Max |diff| against one device after one forward and backward: the loss, the embedding's
    and the head's gradient (this rank's rows) and the block's."""
    ref = reference_lm(vocab, n_embd, n_head)
    ids, tgt = tokens(b, s, vocab)
    tp = _parallel(ref, group)
    loss_ref, _ = _reference(ref, ids, tgt)
    logits = tp["head"](tp["block"](tp["emb"](ids)))
    loss = vocab_parallel_cross_entropy(logits, tgt, group).mean()
    loss.backward()
    rows = slice(tp["emb"].start, tp["emb"].end)
    out = {"loss": (loss - loss_ref).abs().item(),
           "embedding grad": (tp["emb"].weight.grad - ref["emb"].weight.grad[rows]).abs().max().item(),
           "head grad": (tp["head"].weight.grad - ref["head"].weight.grad[rows]).abs().max().item()}
    from labkit.tp.blocks import full_grad_slice
    full = dict(ref["block"].named_parameters())
    for name, p in tp["block"].named_parameters():
        want = full_grad_slice(tp["block"], name, full[name.replace("attn.", "").replace("mlp.", "")].grad)
        out["block." + name] = (p.grad - want).abs().max().item()
    out["vocab rows"] = (rows.start, rows.stop)
    return out


def _saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves while `fn()` runs."""
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def vocab_memory(tokens_=512, vocab=4096, group=None) -> dict:
    """This rank's logits bytes and the bytes the loss saves for backward (`tokens_` positions,
    fp32), three ways: one device, logits all-gathered then torch's cross-entropy, loss parallel.
    Also the largest difference of the two parallel losses from one device."""
    t, r = dist.get_world_size(group), dist.get_rank(group)
    g = torch.Generator().manual_seed(3)
    full = torch.randn(tokens_, vocab, generator=g).to(labkit.device())
    tgt = torch.randint(0, vocab, (tokens_,), generator=g).to(labkit.device())
    k = vocab // t
    mine = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    want = F.cross_entropy(full, tgt)
    res = {}
    one = full.clone().requires_grad_()
    res["one device"] = {"logits": one.numel() * one.element_size(),
                         "saved by the loss": _saved_bytes(lambda: F.cross_entropy(one, tgt))}
    parts = [torch.empty_like(mine) for _ in range(t)]

    def gathered():
        dist.all_gather(parts, mine.detach())
        whole = torch.cat(parts, dim=1).requires_grad_()   # as if all-gathered in autograd
        res["gathered, then cross-entropy"] = {"logits": mine.numel() * 4 + whole.numel() * 4}
        res["diff gathered"] = (F.cross_entropy(whole, tgt) - want).abs().item()
    saved = _saved_bytes(gathered)
    res["gathered, then cross-entropy"]["saved by the loss"] = saved

    def parallel():
        res["diff loss parallel"] = (vocab_parallel_cross_entropy(mine, tgt, group).mean() - want).abs().item()
    res["loss parallel"] = {"logits": mine.numel() * mine.element_size(), "saved by the loss": _saved_bytes(parallel)}
    return res


def torch_loss_parallel(tokens_=64, vocab=256) -> dict:
    """torch's `loss_parallel` (DTensor, logits Shard(-1) on a 1-D mesh) beside labkit's:
    the loss and the logits' gradient against one device, and the collectives torch's
    CommDebugMode counts in forward and backward (no all-gather of the logits)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel
    t, r = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu" if dist.get_backend() == "gloo" else "cuda", (t,))
    g = torch.Generator().manual_seed(4)
    full = torch.randn(tokens_, vocab, generator=g).to(labkit.device())
    tgt = torch.randint(0, vocab, (tokens_,), generator=g).to(labkit.device())
    ref = full.clone().requires_grad_()
    F.cross_entropy(ref, tgt).backward()
    k = vocab // t
    local = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    dt = DTensor.from_local(local, mesh, [Shard(1)])
    with CommDebugMode() as cm, loss_parallel():
        loss = F.cross_entropy(dt, tgt)
        loss.backward()
    counts = {str(k).split(".")[-1]: int(v) for k, v in cm.get_comm_counts().items()}
    mine = full[:, r * k:(r + 1) * k].clone().requires_grad_()
    ours = vocab_parallel_cross_entropy(mine, tgt).mean()
    ours.backward()
    want = ref.grad[:, r * k:(r + 1) * k]
    return {"torch loss diff": (loss.full_tensor() - F.cross_entropy(full, tgt)).abs().item(),
            "torch grad diff": (local.grad - want).abs().max().item(),
            "labkit loss diff": (ours - F.cross_entropy(full, tgt)).abs().item(),
            "labkit grad diff": (mine.grad - want).abs().max().item(),
            "torch collectives": counts}


def memory_figure(measured: dict, formula: dict, title: str = ""):
    """Bars per way of computing the loss: logits held and bytes the loss keeps for backward
    (measured), the formula as a black tick on each bar; one scale for all."""
    import matplotlib.pyplot as plt
    from labkit.i18n import tr_fig
    ways = list(formula)
    title = tr_fig(title) if title else title        # first: the learner's font for the axes
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    width = 0.38
    for j, (what, color) in enumerate((("logits", "tab:blue"), ("saved by the loss", "tab:orange"))):
        xs = [i + (j - 0.5) * width for i in range(len(ways))]
        ax.bar(xs, [measured[w][what] / 2**20 for w in ways], width, color=color,
               label=tr_fig("{what} (measured)", what=tr_fig(what)))
        ax.scatter(xs, [formula[w][what] / 2**20 for w in ways], marker="_", s=400, color="k", zorder=3,
                   label=tr_fig("formula") if j == 0 else None)
    ax.set_xticks(range(len(ways)), [tr_fig(w) for w in ways])
    ax.set_ylabel(tr_fig("MiB on this rank"))
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
