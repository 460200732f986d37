"""What pipeline parallelism divides: the model state each stage's rank holds, measured.

    cluster.run(stage_memory)                     # equal stages: 1/p of the model each
    cluster.run(stage_memory, sizes=[1, 1, 5, 1]) # an uneven cut: the big stage holds 5/8

Each rank builds the 8-layer network of `labkit.pipeline.toy_mlp.mlp`, keeps only its stage (the
other layers are dropped before anything is allocated for them: gradients, Adam's moments),
runs one forward, backward and Adam step on its stage alone, and measures what it holds with
`labkit.memory.measure` (exact bytes of parameters, gradients and optimizer state). The one
process's figure is the whole network after the same step.
"""
import torch
import torch.distributed as dist

from labkit.memory import measure
from labkit.pipeline.toy_mlp import mlp, split


def _stepped(module, width):
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    module(torch.ones(2, width, device=next(module.parameters()).device)).square().sum().backward()
    opt.step()
    return measure(module, opt)


def stage_memory(layers: int = 8, width: int = 64, sizes=None) -> dict:
    """This rank's measured model state (bytes by category) for its stage of an equal or
    `sizes` cut, and the whole network's on one process."""
    rank, n = dist.get_rank(), dist.get_world_size()
    stage = split(mlp(layers, width, frozen=None), n, sizes)[rank]     # the rest is garbage now
    mine = _stepped(stage, width)
    whole = _stepped(mlp(layers, width, frozen=None), width)
    return {"rank": rank, "layers": len(stage), "of": layers,
            "params": mine.params, "model state": mine.model_state,
            "one process params": whole.params, "one process model state": whole.model_state}
