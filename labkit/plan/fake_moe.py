"""Expert parallelism at full scale without the hardware: a Mixtral-8x7B-shaped model, its
experts split over EP ranks and every weight sharded by FSDP2, on torch's fake process group.

    row = shard_bytes("Mixtral-8x7B", world_size=64, ep=8)   # call through fake_scale(moe=...)

The layout is torchtitan's and Megatron-core's (`labkit.nd.layout`): the world's data ranks
are re-cut into EP x EDP for the experts. Each rank builds only its E / EP experts (stacked
SwiGLU weights, as torchtitan's GroupedExperts) and FSDP2 shards them over the EDP replicas that
hold the same experts; attention, router, embeddings and norms are sharded over all ranks.
Trap, measured: FSDP2 splits dim 0 by default, and dim 0 of the stacked experts is E / EP
(1 for Mixtral at EP 8): rank 0 then keeps a whole expert and its neighbours nothing. As
torchtitan does (`shard_placement_fn` when EDP > E / EP), the experts are split on dim 1. The
model holds the parameters only: the routed forward with its all-to-all is `labkit.moe`'s.
Shapes: Jiang et al. 2024 (arXiv 2401.04088), table 1.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from labkit.plan.llama import Attention, LlamaConfig, RMSNorm


@dataclass(frozen=True)
class MoEConfig:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 8
    ffn_dim: int = 14336        # one expert's SwiGLU inner size
    experts: int = 8
    top_k: int = 2
    vocab_size: int = 32000

    @property
    def expert_params(self) -> int:
        return self.n_layers * self.experts * 3 * self.dim * self.ffn_dim

    @property
    def params(self) -> int:
        h, kv = self.dim, self.dim // self.n_heads * self.n_kv_heads
        dense_block = 2 * h * h + 2 * h * kv + h * self.experts + 2 * h
        return 2 * self.vocab_size * h + self.n_layers * dense_block + h + self.expert_params


MOE = {"Mixtral-8x7B": MoEConfig()}


class Experts(nn.Module):
    """This rank's experts, stacked: w1, w3 (E_local, ffn, h), w2 (E_local, h, ffn)."""

    def __init__(self, n_local: int, dim: int, ffn: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n_local, ffn, dim))
        self.w3 = nn.Parameter(torch.empty(n_local, ffn, dim))
        self.w2 = nn.Parameter(torch.empty(n_local, dim, ffn))


class MoEBlock(nn.Module):
    def __init__(self, c: MoEConfig, ep: int):
        super().__init__()
        lc = LlamaConfig(dim=c.dim, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads)
        self.attention_norm, self.ffn_norm = RMSNorm(c.dim), RMSNorm(c.dim)
        self.attention = Attention(lc)
        self.router = nn.Linear(c.dim, c.experts, bias=False)
        self.experts = Experts(c.experts // ep, c.dim, c.ffn_dim)


class MoEModel(nn.Module):
    def __init__(self, c: MoEConfig, ep: int = 1):
        super().__init__()
        if c.experts % ep:
            raise ValueError(f"{c.experts} experts do not split over ep {ep}; pick a divisor")
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(MoEBlock(c, ep) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)


def shard_bytes(name: str, world_size: int, ep: int, expert_dim: int = 1) -> dict:
    """Rank 0's bytes of parameters, gradients and Adam state with EP over `ep` of `world_size`
    data ranks, against the planner's formula (16 B/param: dense / world + experts / (EP x EDP)),
    and the bytes one expert all-gather brings in (E / EP experts of one layer, fp32)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard

    from labkit.memory import model_states
    from labkit.plan.fake_pg import _init, _nbytes, _state_only_step
    c = MOE[name]
    if world_size % ep:
        raise ValueError(f"world size {world_size} is not a multiple of ep {ep}: EP re-cuts the "
                         f"data ranks into EP x EDP")
    edp = world_size // ep
    _init(world_size)
    mesh = init_device_mesh("cpu", (edp, ep), mesh_dim_names=("edp", "ep"))
    everyone = mesh["edp", "ep"]._flatten("dp")
    with torch.device("meta"):
        model = MoEModel(c, ep)
    for block in model.layers:
        fully_shard(block.experts, mesh=mesh["edp"], shard_placement_fn=lambda p: Shard(expert_dim))
        fully_shard(block, mesh=everyone)
    fully_shard(model, mesh=everyone)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.Adam(params, lr=1e-4, foreach=False)
    _state_only_step(opt)
    expert_ids = {id(p) for b in model.layers for p in b.experts.parameters()}
    out = {"model": name, "world_size": world_size, "ep": ep, "edp": edp, "expert dim": expert_dim,
           "params": sum(_nbytes(p) for p in params), "grads": sum(_nbytes(p.grad) for p in params),
           "optimizer": sum(_nbytes(v) for s in opt.state.values() for k, v in s.items()
                            if torch.is_tensor(v) and k != "step"),
           "param count": c.params, "expert params": c.expert_params}
    out["measured"] = out["params"] + out["grads"] + out["optimizer"]
    dense = c.params - c.expert_params
    out["formula"] = (model_states(dense, zero_stage=3, world_size=world_size).model_state +
                      model_states(c.expert_params / ep, zero_stage=3, world_size=edp).model_state)
    pad = 0.0
    for p in params:                              # rank 0 holds ceil(rows / n) rows of each
        n, dim = (edp, expert_dim) if id(p) in expert_ids else (world_size, 0)
        rows, rest = p.shape[dim], math.prod(p.shape) // p.shape[dim]
        pad += (math.ceil(rows / n) - rows / n) * rest
    out["padding"] = 16 * pad
    out["difference"] = out["measured"] - out["formula"] - out["padding"]
    layer0 = model.layers[0].experts
    out["gathered experts"] = sum(p.numel() * 4 for p in layer0.parameters())   # full, unsharded
    out["gathered formula"] = 4 * c.experts // ep * 3 * c.dim * c.ffn_dim
    dist.destroy_process_group()
    return out
