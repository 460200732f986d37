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
    res = {"loss": abs(whole.item() - loss_ref.item()), "loss value": abs(loss_ref.item()),
           "largest gradient": max(p.grad.abs().max().item() for p in ref.parameters())}
    for name, p in model.named_parameters():
        res[name] = (p.grad - ref_grads[name].grad).abs().max().item()
    return res


def reduction_lengths(batch=2, seq=64, vocab=32, hidden=32, heads=4, n=4, params=True) -> list:
    """The reductions along `cp_step_parity`'s step, each summed in another order on the CP
    ranks than on one process. Forward: embedding + position (2), ln1 (hidden), qkv (hidden),
    the attention's chain as labkit.cp.parity.attention_tolerance (scores head_dim, softmax
    over seq + the ring's n chunks, output over seq), proj (hidden) + residual (2), ln2 (hidden),
    fc1 (hidden), fc2 (4 hidden) + residual (2), head (hidden), the cross-entropy's log-sum-exp
    (vocab + 1), the loss's sum over batch x seq tokens and the all-reduce over n ranks (n + 1).
    Backward (params): the head's, fc2's, fc1's, proj's and qkv's transposes (vocab, hidden,
    4 hidden, hidden, 3 hidden), ln2's and ln1's row terms (hidden each), the attention's
    backward (dv over seq, dP and the row term over head_dim, dq and dk over seq, the ring's
    n + 1), the residual adds (2 each) and each weight gradient's sum over the batch x seq
    positions plus the CP group's all-reduce (n)."""
    d = hidden // heads
    forward = [2, hidden, hidden, d, seq + n, seq, hidden, 2, hidden, hidden, 4 * hidden, 2,
               hidden, vocab + 1, batch * seq + n + 1]
    if not params:
        return forward
    return forward + [vocab, hidden, 4 * hidden, 2, hidden, hidden, 2, seq, d, d, seq, seq, n + 1,
                      3 * hidden, hidden, 2, batch * seq + n]


def tolerance(res: list, batch=2, seq=64, params=True, n=4) -> float:
    """The most `cp_step_parity`'s differences may be on any CPU (fp32), derived, not tuned:
    labkit.numerics.chain_bound over `reduction_lengths` (to first order the links' relative
    errors add; each is at most 2 gamma_length for two summation orders). The scale is the
    largest value compared, read off the one-process reference in `res` (magnitudes do not
    depend on the CPU): the largest gradient entry (params) or the loss. batch 2, seq 64, 4 ranks:
    1.6e-4 x the largest gradient (1367 terms); the loss: 7.5e-5 x the loss (632)."""
    from labkit.numerics import chain_bound
    key = "largest gradient" if params else "loss value"
    scale = max(r[key] for r in res)
    return chain_bound(reduction_lengths(batch, seq, n=n, params=params), scale)


def worst(res: list, params=True) -> float:
    """The largest weight-gradient difference over ranks (params) or the loss difference."""
    skip = {"loss", "loss value", "largest gradient"}
    if not params:
        return max(r["loss"] for r in res)
    return max(v for r in res for k, v in r.items() if k not in skip)
