"""The vocabulary split over the tensor-parallel group: embedding and cross-entropy (Megatron-LM,
arXiv 1909.08053, section 3, "input embedding" and the fused output/loss).

    emb = VocabParallelEmbedding(nn.Embedding(V, h), group)   # rank r: rows r*V/t .. (r+1)*V/t-1
    head = ColumnParallelLinear(nn.Linear(h, V, bias=False), group)   # logits split on V
    loss = vocab_parallel_cross_entropy(head(x), targets, group).mean()

Embedding: a token id outside this rank's rows is masked (looked up as row 0, its vector then
set to 0); the t partial outputs are summed by one all-reduce (g: identity in backward, so
each rank's rows receive exactly the gradient of the tokens it owns).

Cross-entropy over logits split on the vocabulary, never gathered (a logit row of V values
would be b x s x V floats: 2.1 GB in fp32 for one 4,096-token sequence over Llama 3's 128,256
words). Per token, three all-reduces of b x s values each:
  1. the max over the vocabulary (MAX), subtracted for a stable exp;
  2. the sum of exp(logit - max) (SUM);
  3. the target's logit, which lives on one rank only (the others add 0) (SUM).
loss = log(sum exp) - target logit. Backward needs no collective: d loss / d logits on this
rank's slice is softmax - onehot(target), both local once the sum is known.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.i18n import N_, tr
from labkit.tp import comms
from labkit.tp.layers import shard_rows


def _tp(group):
    return dist.get_world_size(group), dist.get_rank(group)


class VocabParallelEmbedding(nn.Module):
    """Rank r holds rows [start, end) of the embedding table; one all-reduce in forward."""

    def __init__(self, emb: nn.Embedding, group=None):
        super().__init__()
        t, r = _tp(group)
        rows = shard_rows(emb.num_embeddings, t, r, tr("vocabulary size"))
        self.group, self.start, self.end = group, rows.start, rows.stop
        self.weight = nn.Parameter(emb.weight.detach()[rows].clone())

    def forward(self, ids):
        outside = (ids < self.start) | (ids >= self.end)
        local = (ids - self.start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return comms.reduce_from_tp(out, self.group)


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, start, group):
        logits = logits.float()
        m = logits.max(dim=-1).values                     # 1. max over the whole vocabulary
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - m.unsqueeze(-1)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)                         # 2. sum of exponentials
        dist.all_reduce(sum_exp, group=group)
        v = logits.shape[-1]
        mine = (target >= start) & (target < start + v)
        local = (target - start).masked_fill(~mine, 0)
        tgt = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(~mine, 0.0)
        dist.all_reduce(tgt, group=group)                 # 3. the target's logit, from its rank
        exp.div_(sum_exp.unsqueeze(-1))                   # softmax of this rank's slice, in place
        ctx.save_for_backward(exp, local, mine)
        return sum_exp.log() - tgt

    @staticmethod
    def backward(ctx, grad):
        softmax, local, mine = ctx.saved_tensors
        g = softmax.clone()
        g.scatter_add_(-1, local.unsqueeze(-1), -mine.to(g.dtype).unsqueeze(-1))
        return g * grad.unsqueeze(-1), None, None, None


def vocab_parallel_cross_entropy(logits, target, group=None):
    """Per-token loss (shape of `target`) from this rank's vocabulary slice of the logits
    (..., V/t); equal on every rank. Rank r's slice is columns r*V/t .. (r+1)*V/t - 1."""
    t, r = _tp(group)
    return _VocabParallelCE.apply(logits, target, r * logits.shape[-1], group)


def logits_bytes(tokens: int, vocab: int, t: int, bytes_per_value: int = 4) -> dict:
    """Bytes of logits on one rank, and of what the loss keeps for backward: one device (or
    logits gathered before torch's cross-entropy) keeps the whole row per token, loss parallel
    1/t of it. Pure arithmetic."""
    full = tokens * vocab * bytes_per_value
    return {N_("one device"): {"logits": full, "saved by the loss": full},          # N_: figure labels
            N_("gathered, then cross-entropy"): {"logits": full // t + full, "saved by the loss": full},
            N_("loss parallel"): {"logits": full // t, "saved by the loss": full // t}}
