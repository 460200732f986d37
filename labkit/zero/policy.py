"""Mixed precision for ZeRO stage 3, in both layouts the frameworks use (layer 3; the bytes are pure).

    policy = Policy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, layout="sharded")
    model, opt = labkit.zero.wrap(model, torch.optim.Adam, stage=3, policy=policy, lr=1e-3)

layout="masters" (DeepSpeed's): the sharded parameters are 16-bit; fp32 master copies of the
  shards, with Adam's m and v, live inside the optimizer (MasterOptimizer), which writes the
  rounded result back after each step. Per parameter on a rank: 2 + 2 + 4 + 4 + 4 = 16 / N bytes.
layout="sharded" (FSDP2's MixedPrecisionPolicy): the sharded parameters stay fp32 and are the
  masters; each unit is all-gathered in `param_dtype` (cast from the fp32 shard just before the
  all-gather), gradients are reduce-scattered in `reduce_dtype` and kept fp32 in the shard, so any
  torch optimizer on `model.parameters()` updates fp32 weights: 4 + 4 + 4 + 4 = 16 / N bytes.
Both all-gather 16-bit parameters (twice per step: forward and backward); the reduce-scatter moves
`reduce_dtype` (param_dtype when None, as FSDP2). The floating inputs of the model's forward are cast
to param_dtype (FSDP2's cast_forward_inputs).
"""
from dataclasses import dataclass

import torch

LAYOUTS = ("masters", "sharded")
PARAM_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Policy:
    param_dtype: torch.dtype = torch.bfloat16
    reduce_dtype: torch.dtype = None         # None: param_dtype
    layout: str = "sharded"

    def __post_init__(self):
        if self.param_dtype not in PARAM_DTYPES:
            raise ValueError(f"param_dtype must be torch.bfloat16 or torch.float16, got {self.param_dtype}")
        if self.reduce_dtype not in (None, torch.float32, *PARAM_DTYPES):
            raise ValueError(f"reduce_dtype must be None, torch.float32 or a 16-bit dtype, got {self.reduce_dtype}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be 'masters' (16-bit shards, fp32 masters in the optimizer) or "
                             f"'sharded' (fp32 shards are the masters, as FSDP2), got {self.layout!r}")

    @property
    def reduce(self) -> torch.dtype:
        return self.reduce_dtype or self.param_dtype

    @property
    def shard_dtype(self) -> torch.dtype:
        """The dtype of `model.parameters()` (the shards) and of their gradients."""
        return self.param_dtype if self.layout == "masters" else torch.float32


def _size(dtype) -> int:
    return dtype.itemsize


def bytes_per_rank(policy: Policy, psi: float, world: int, states: int = 2) -> dict:
    """Model state on one rank by category, Psi parameters, `states` fp32 optimizer states
    (Adam: 2), padding left out: {'params', 'grads', 'master', 'optimizer'}."""
    s = _size(policy.shard_dtype)
    return dict(params=s * psi / world, grads=s * psi / world,
                master=4 * psi / world if policy.layout == "masters" else 0,
                optimizer=4 * states * psi / world)


def traffic_per_rank(policy: Policy, psi_padded: float, world: int) -> dict:
    """Bytes each rank sends per step, by collective: {name: (bytes, dtype name)}."""
    f = (world - 1) / world
    p, r = _size(policy.param_dtype), _size(policy.reduce)
    name = lambda d: str(d).replace("torch.", "")       # noqa: E731
    return {"all-gather (forward)": (f * psi_padded * p, name(policy.param_dtype)),
            "all-gather (backward)": (f * psi_padded * p, name(policy.param_dtype)),
            "reduce-scatter": (f * psi_padded * r, name(policy.reduce))}
