"""Expert parallelism in numbers (pure: no torch, no processes).

    capacity(tokens=64, experts=8, k=2, capacity_factor=1.25)   # -> 20 slots per expert
    dispatch_bytes(counts, rank=0, hidden=64)    # bytes rank 0 sends in the dispatch all-to-all
    uniform_dispatch_bytes(tokens, hidden, k, n) # (n-1)/n of k x tokens x hidden values
    params_per_rank(hidden, ffn_hidden, experts, n)

Which assignments count against an expert's capacity (`capacity_order`): a rank's own tokens
only (capacity is worked out from the tokens of the forward that routes them, on one device or
on one rank), all first choices before any second choice, then by position in the batch.
GShard (Lepikhin et al., 2020) gives first choices the same priority; Switch (Fedus et al., 2021)
has k = 1, where the order is just the batch order.

The load-balancing loss (`aux_loss`): Switch's is top-1; for k > 1 three conventions are in use
(`aux_loss_conventions`): labkit counts all k choices and divides by k (Megatron-core); GShard's
top-2 loss counts first choices only (DeepSpeed's top2gating); Hugging Face's Mixtral counts all
k without dividing (balanced routing gives k x weight).
"""
import math

from labkit.i18n import ShownName


def capacity(tokens: int, experts: int, k: int, capacity_factor) -> int:
    """Slots per expert: ceil(capacity_factor x k x tokens / experts); no limit when None."""
    if capacity_factor is None:
        return tokens * k
    return math.ceil(capacity_factor * k * tokens / experts)


def capacity_order(tokens: int, k: int) -> list:
    """The (token, choice) pairs in the order they take an expert's slots: choice-major."""
    return [(t, j) for j in range(k) for t in range(tokens)]


def kept(choices: list, experts: int, capacity_factor) -> list:
    """For each token's list of k chosen experts, which choices keep a slot (True) and which
    are dropped (False), by `capacity_order`: the reference the layer is tested against."""
    tokens, k = len(choices), len(choices[0]) if choices else 0
    cap = capacity(tokens, experts, k, capacity_factor)
    used = [0] * experts
    keep = [[False] * k for _ in range(tokens)]
    for t, j in capacity_order(tokens, k):
        e = choices[t][j]
        if used[e] < cap:
            used[e] += 1
            keep[t][j] = True
    return keep


def aux_loss(fraction: list, mean_prob: list, weight: float = 0.01) -> float:
    """The load-balancing loss as labkit computes it: weight x E x sum_e f_e P_e, where f_e is
    the share of the k x tokens assignments routed to e (all k choices counted, divided by k:
    Megatron-core's generalisation of Switch's top-1 loss) before dropping, and P_e the mean
    router probability of e. Balanced routing gives weight x 1. See `aux_loss_conventions`."""
    return weight * len(fraction) * sum(f * p for f, p in zip(fraction, mean_prob))


AUX_CONVENTIONS = (ShownName("all k / k (Megatron-core, labkit)"), ShownName("first choices (GShard top-2)"),
                   ShownName("all k, not / k (Hugging Face Mixtral)"))


def aux_loss_conventions(choices: list, mean_prob: list, weight: float = 0.01) -> dict:
    """The three load-balancing losses in use, from each token's k chosen experts (best first)
    and the mean router probability P_e. With k = 1 all three are Switch's loss.
    - Megatron-core (labkit): f_e = copies to e / (k T); balanced: weight.
    - GShard's top-2 (DeepSpeed's top2gating): f_e from first choices only, / T; balanced: weight.
    - Hugging Face Mixtral: f_e = copies to e / T (all k, not divided by k); balanced: k x weight."""
    experts, tokens = len(mean_prob), len(choices)
    k = len(choices[0]) if choices else 1
    every, first = [0] * experts, [0] * experts
    for c in choices:
        first[c[0]] += 1
        for e in c:
            every[e] += 1
    t = max(tokens, 1)
    fracs = ([c / (k * t) for c in every], [c / t for c in first], [c / t for c in every])
    return {name: aux_loss(f, mean_prob, weight) for name, f in zip(AUX_CONVENTIONS, fracs)}


def dispatch_bytes(counts: list, rank: int, hidden: int, bytes_per_value: int = 4) -> int:
    """Payload bytes `rank` sends in the dispatch all-to-all (what stays on the rank is not
    sent); the combine sends back what it received: column `rank` of the matrix."""
    return sum(c for dst, c in enumerate(counts[rank]) if dst != rank) * hidden * bytes_per_value


def combine_bytes(counts: list, rank: int, hidden: int, bytes_per_value: int = 4) -> int:
    return sum(row[rank] for src, row in enumerate(counts) if src != rank) * hidden * bytes_per_value


def uniform_dispatch_bytes(tokens: int, hidden: int, k: int, n: int, bytes_per_value: int = 4) -> float:
    """Balanced routing: each rank sends (n-1)/n of its k x tokens x hidden values, each way."""
    return (n - 1) / n * k * tokens * hidden * bytes_per_value


def split_exchange_bytes(experts: int, n: int, bytes_per_value: int = 8) -> int:
    """The split sizes sent first: experts/n counts (int64) to each of the n-1 other ranks."""
    return (n - 1) * (experts // n) * bytes_per_value


def expert_params(hidden: int, ffn_hidden: int) -> int:
    """One expert: hidden -> ffn_hidden -> hidden, with biases."""
    return hidden * ffn_hidden + ffn_hidden + ffn_hidden * hidden + hidden


def params_per_rank(hidden: int, ffn_hidden: int, experts: int, n: int = 1) -> int:
    """Parameters one rank holds: its experts/n experts and the whole router (hidden x E)."""
    return experts // n * expert_params(hidden, ffn_hidden) + hidden * experts


def state_bytes_per_rank(hidden: int, ffn_hidden: int, experts: int, n: int = 1,
                         optimizer: str = "adam", bytes_per_value: int = 4) -> dict:
    """Bytes of parameters, gradients and optimizer state on one rank, fp32 (module 01's
    categories): Adam keeps m and v per parameter and one 4-byte step counter per parameter
    tensor (4 per expert, 1 for the router); SGD without momentum keeps nothing."""
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    p = params_per_rank(hidden, ffn_hidden, experts, n) * bytes_per_value
    adam = optimizer == "adam"
    return {"params": p, "grads": p, "momentum": p if adam else 0, "variance": p if adam else 0,
            "other": 4 * (4 * (experts // n) + 1) if adam else 0}
