"""A mixture-of-experts feed-forward layer for one device.

    moe = MoE(hidden=64, ffn_hidden=128, experts=8, k=2, capacity_factor=1.25)
    y = moe(x)                   # x: (tokens, hidden) -> y: (tokens, hidden)
    moe.aux_loss                 # this forward's load-balancing loss (add it to yours)
    moe.tokens_per_expert        # (experts,) token copies each expert computed (dropped ones not)
    moe.dropped                  # how many (token, choice) assignments found their expert full

Routing: the router (a bias-free linear, hidden -> experts) gives each token a softmax over the
experts; each token goes to its k most probable experts. Its gates are those probabilities,
divided by their sum when k > 1 (as Mixtral's softmax over the top-k logits), left as they are
when k = 1 (as Switch: otherwise the gate is always 1 and the router learns nothing from the
output). The output of a token is sum over its kept choices of gate x expert(token).

Capacity: with a capacity factor c each expert takes at most ceil(c x k x tokens / experts)
assignments of this forward; first choices take slots before second choices, then batch order
(`formulas.capacity_order`). A dropped assignment adds nothing (the token's other choice still
counts; a token with every choice dropped gives 0, the residual connection around the layer
carries it). Gates are not renormalised after dropping.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from labkit.i18n import tr
from labkit.moe.formulas import capacity


class Expert(nn.Module):
    """One feed-forward expert: hidden -> ffn_hidden -> GELU -> hidden."""

    def __init__(self, hidden: int, ffn_hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn_hidden)
        self.fc2 = nn.Linear(ffn_hidden, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def where():
    """This process's rank inside a process group, None on one device."""
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def route(logits: torch.Tensor, k: int, capacity_factor=None, bias=None):
    """(probs (T, E), expert (T, k), gate (T, k), keep (T, k) bool) for router logits (T, E).
    bias (E,): added to the probabilities only to choose the top k (DeepSeek-V3's auxiliary-loss-
    free balancing); the gates are the probabilities without it."""
    probs = logits.softmax(dim=-1)
    if bias is None:
        top, expert = probs.topk(k, dim=-1)
    else:
        expert = (probs.detach() + bias).topk(k, dim=-1).indices
        top = probs.gather(-1, expert)
    gate = top if k == 1 else top / top.sum(dim=-1, keepdim=True)
    return probs, expert, gate, capacity_mask(expert, logits.shape[-1], capacity_factor)


def capacity_mask(expert: torch.Tensor, experts: int, capacity_factor=None) -> torch.Tensor:
    """True where a (token, choice) keeps its slot: the first `capacity` assignments of each
    expert in choice-major order (all first choices, then all second choices)."""
    tokens, k = expert.shape
    if capacity_factor is None:
        return torch.ones_like(expert, dtype=torch.bool)
    flat = expert.t().reshape(-1)                              # choice-major
    onehot = F.one_hot(flat, experts)
    slot = (onehot.cumsum(0) * onehot).sum(-1) - 1             # place in its expert's queue
    keep = slot < capacity(tokens, experts, k, capacity_factor)
    return keep.view(k, tokens).t()


def load_balancing_loss(probs, expert, weight: float) -> torch.Tensor:
    """weight x E x sum_e f_e P_e (f_e: share of the k x T assignments to e before dropping,
    all k choices counted and divided by k, as Megatron-core; P_e: mean probability of e).
    GShard's top-2 and Hugging Face's Mixtral count differently: formulas.aux_loss_conventions.
    Gradients reach the router through P_e only."""
    tokens, experts = probs.shape
    f = torch.bincount(expert.reshape(-1), minlength=experts).to(probs.dtype) / max(expert.numel(), 1)
    return weight * experts * (f * probs.mean(0)).sum() if tokens else probs.sum() * 0


def run_grouped(experts, xs: torch.Tensor, counts) -> torch.Tensor:
    """Rows of xs grouped by expert (counts[i] rows for experts[i], in order) through their
    expert; returns the outputs in the same order."""
    parts = torch.split(xs, [int(c) for c in counts])
    return torch.cat([e(p) for e, p in zip(experts, parts)]) if len(parts) else xs


class MoE(nn.Module):
    """Top-k mixture of `experts` feed-forward experts with a softmax router (one device)."""

    def __init__(self, hidden: int, ffn_hidden: int, experts: int, *, k: int = 2,
                 capacity_factor=None, aux_loss_weight: float = 0.01):
        super().__init__()
        if not 1 <= k <= experts:
            raise ValueError(tr("k = {k} experts per token, but the layer has {experts} experts: "
                                "choose 1 <= k <= {experts}", k=k, experts=experts))
        if capacity_factor is not None and not capacity_factor > 0:
            raise ValueError(tr("capacity_factor = {c}: it must be > 0 (1.0 gives each expert an equal "
                                "share of the tokens), or None for no limit", c=capacity_factor))
        self.hidden, self.ffn_hidden, self.num_experts, self.k = hidden, ffn_hidden, experts, k
        self.capacity_factor, self.aux_loss_weight = capacity_factor, aux_loss_weight
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, ffn_hidden) for _ in range(experts))
        self.aux_loss = self.tokens_per_expert = self.dropped = self.routing = None
        self.expert_bias, self.bias_update = None, 0.0

    def balance_with_bias(self, update: float) -> "MoE":
        """DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias, added to the routing
        scores only to choose the top k; after each step `update_bias(load)` moves it by
        `update` towards balance. Returns the layer."""
        self.expert_bias = torch.zeros(self.num_experts, device=self.router.weight.device)
        self.bias_update = update
        return self

    @torch.no_grad()
    def update_bias(self, load: torch.Tensor) -> None:
        """load (E,): copies per expert this step, every rank's (the same on every rank): an
        overloaded expert's bias falls by `bias_update`, an underloaded one's rises."""
        load = load.to(self.expert_bias.dtype)
        self.expert_bias += self.bias_update * torch.sign(load.mean() - load)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.hidden:
            f = dict(rank=where(), hidden=self.hidden, shape=tuple(x.shape))
            raise ValueError(tr("MoE: expected tokens of shape (tokens, {hidden}), got {shape}: flatten "
                                "(batch, sequence) into tokens and check the hidden size", **f)
                             if f["rank"] is None else
                             tr("MoE on rank {rank}: expected tokens of shape (tokens, {hidden}), got "
                                "{shape}: flatten (batch, sequence) into tokens and check the hidden "
                                "size", **f))
        probs, expert, gate, keep = route(self.router(x), self.k, self.capacity_factor, self.expert_bias)
        self.aux_loss = load_balancing_loss(probs, expert, self.aux_loss_weight)
        self.tokens_per_expert = torch.bincount(expert[keep], minlength=self.num_experts)
        self.dropped = int((~keep).sum())
        self.routing = {"expert": expert.detach(), "gate": gate.detach(), "keep": keep}
        token = torch.arange(x.shape[0], device=x.device).repeat_interleave(self.k).view_as(expert)
        token, expert, gate = token[keep], expert[keep], gate[keep]
        order = torch.argsort(expert, stable=True)                 # group the copies by expert
        token, expert, gate = token[order], expert[order], gate[order]
        y = self.experts_forward(x[token], expert)
        return torch.zeros_like(x).index_add(0, token, y * gate.unsqueeze(1))

    def experts_forward(self, xs: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
        """Token copies xs sorted by their expert index `expert` -> expert outputs, same order.
        On one device: every expert is here. `expert_parallel` replaces this step."""
        return run_grouped(self.experts, xs, torch.bincount(expert, minlength=self.num_experts))
