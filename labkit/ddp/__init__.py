"""Data parallelism (notebook 03): labkit's DDP strategies, measured against torch's.

    from labkit.ddp import NaiveDDP, FlatDDP, BucketedDDP

- `data_parallel`: the strategies, naive next to flat next to bucketed-with-overlap, no_sync;
- `parity`: training against one process on the global batch (tests, checker, notebook);
- `timeline`: one step per rank with real timestamps, the overlap fraction, the figure;
- `measure`: step time, bytes on the wire and gradient memory of labkit's and torch's DDP
  (`python -m labkit.bench ddp`);
- `sampler`: DistributedSampler shards and the validation padding skew;
- `lr_scaling`: the linear and square-root learning-rate rules, and a run that compares them.
"""
from labkit.ddp.data_parallel import STRATEGIES, BucketedDDP, FlatDDP, NaiveDDP, trainable

__all__ = ["NaiveDDP", "FlatDDP", "BucketedDDP", "STRATEGIES", "trainable"]
