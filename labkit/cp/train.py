"""Run on every rank: one training step of one transformer block under context parallelism,
against one process on the whole sequence.

    cluster.run(labkit.cp.train.cp_step_parity)                  # CP gradients reduced: equal
    cluster.run(labkit.cp.train.cp_step_parity, cp_reduce=False) # not reduced: each rank's own part

Under CP every rank holds the full weights but computes their gradients from its s/N positions
only, so three things must be right:
- the tokens, the labels and the positions (for the position embedding or RoPE) are sharded with
  the same permutation (zig-zag here: `shard_sequence(..., layout="zigzag")`, as torch's
  `context_parallel(buffers=[...])` shards every buffer it is given);
- the loss is the mean over all CP ranks' tokens: each rank sums its own and divides by the
  total count, so that the ranks' gradients add up to the gradient of the mean;
- the weight gradients are summed over the CP group (Megatron folds CP into its data-parallel
  group, torchtitan's mesh has `dp_shard_cp`): without it each rank keeps the gradient of its
  own positions only.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from labkit.cp.api import attention, reference
from labkit.cp.shard import shard_sequence


class Block(nn.Module):
    """Embedding + learned positions, one pre-norm attention block with an MLP, an output head."""

    def __init__(self, vocab=32, seq=64, hidden=32, heads=4):
        super().__init__()
        self.heads = heads
        self.emb, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, positions, attend):
        b, s = tokens.shape
        x = self.emb(tokens) + self.pos(positions)
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = attend(q.contiguous(), k.contiguous(), v.contiguous())      # (b, heads, s, d)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x)


def _data(batch, seq, vocab, seed=1, device=None):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g).to(device)
    return tokens[:, :-1], tokens[:, 1:]                 # inputs, next-token labels


def cp_step_parity(seq=64, batch=2, vocab=32, hidden=32, heads=4, cp_reduce=True,
                   layout="zigzag", method="ring", group=None, labels_layout=None) -> dict:
    """This rank's max |diff| of every weight gradient (and the loss) against one process on
    the whole sequence, and the largest gradient entry (the scale the differences compare to).
    labels_layout: shard the labels in another layout than the tokens (the mistake to see)."""
    import labkit
    dev = labkit.device()
    inputs, labels = _data(batch, seq, vocab, device=dev)
    torch.manual_seed(0)
    model = Block(vocab, seq, hidden, heads).to(dev)
    pos = torch.arange(seq, device=dev).expand(batch, seq)
    ref = Block(vocab, seq, hidden, heads).to(dev)
    ref.load_state_dict(model.state_dict())
    logits = ref(inputs, pos, lambda q, k, v: reference(q, k, v, causal=True))
    loss_ref = F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))   # mean, all tokens
    loss_ref.backward()
    # one permutation for tokens, labels and positions
    mine = [shard_sequence(t, 1, group=group, layout=lay) for t, lay in
            ((inputs, layout), (labels, labels_layout or layout), (pos, layout))]
    out = model(mine[0], mine[2], lambda q, k, v: attention(q, k, v, group=group, causal=True,
                                                           method=method, layout=layout))
    total = batch * seq                                  # every CP rank's tokens
    loss = F.cross_entropy(out.reshape(-1, vocab), mine[1].reshape(-1), reduction="sum") / total
    loss.backward()
    whole = loss.detach().clone()
    dist.all_reduce(whole, group=group)                  # the loss of the step, for the log
    if cp_reduce:
        for p in model.parameters():
            dist.all_reduce(p.grad, group=group)         # the CP group's reduction
    ref_grads = dict(ref.named_parameters())
    res = {"loss": abs(whole.item() - loss_ref.item()),
           "largest gradient": max(p.grad.abs().max().item() for p in ref.parameters())}
    for name, p in model.named_parameters():
        res[name] = (p.grad - ref_grads[name].grad).abs().max().item()
    return res


def tolerance(res: list, batch=2, seq=64) -> float:
    """fp32 bound for a gradient entry: a sum over the batch x seq positions (then over the
    ranks) of terms no larger than the largest gradient, each addition off by at most the unit
    roundoff 2^-24: (batch x seq) x 2^-24 x the largest gradient entry."""
    return batch * seq * 2.0 ** -24 * max(r["largest gradient"] for r in res)


def worst(res: list, params=True) -> float:
    """The largest weight-gradient difference over ranks (params) or the loss difference."""
    skip = {"loss", "largest gradient"}
    if not params:
        return max(r["loss"] for r in res)
    return max(v for r in res for k, v in r.items() if k not in skip)
