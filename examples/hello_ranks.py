"""The same function, run by a labkit Cluster or by torchrun.

    python examples/hello_ranks.py                                   # a labkit Cluster of 2 ranks
    python -m torch.distributed.run --standalone --nproc-per-node 2 examples/hello_ranks.py

Note there is no `if __name__ == "__main__":` guard: labkit's ranks are fresh interpreters
that never re-import this script, so a newcomer's script works as written.
"""
import os

import torch
import torch.distributed as dist

import labkit


def hello():
    """Every rank adds its rank number into one all_reduce; all get the same sum."""
    t = torch.tensor([float(labkit.rank())], device=labkit.device())
    dist.all_reduce(t)
    return f"rank {labkit.rank()} of {labkit.world_size()} on {labkit.device()}: sum of ranks = {t.item():g}"


if "TORCHELASTIC_RUN_ID" in os.environ:          # started by torchrun: one process per rank
    labkit.init_process_group()
    print(hello())
    dist.barrier()                               # nobody closes its sockets while a peer still reads
    dist.destroy_process_group()
else:                                            # started by hand: a Cluster does the ranks
    with labkit.Cluster(world_size=2, spares=0) as cluster:
        for line in cluster.run(hello):
            print(line)
