"""Data parallelism (notebook 03): labkit's DDP strategies, measured against torch's.

    from labkit.ddp import NaiveDDP, FlatDDP, BucketedDDP

- `base`: what every strategy shares (broadcasts, no_sync); `data_parallel`: the strategies,
  naive next to flat (and `bucketed`: BucketedDDP, with
  torch DDP's bucket layout, find_unused_parameters, gradient_as_bucket_view), no_sync;
- `clock`: what a timeline stamp measures on CPU (host time) and on GPU (CUDA events);
- `parity`: training against one process on the global batch (tests, checker, notebook);
- `timeline`: one step per rank with real timestamps, the overlap fraction, the figure;
- `benchmark`: step time, bytes on the wire and gradient memory of labkit's and torch's DDP,
  the table and paired ratios (`python -m labkit.bench ddp` is a command line over it);
- `sampler`: DistributedSampler shards and the validation padding skew;
- `lr_scaling`: the linear and square-root learning-rate rules, and a run that compares them.
"""
from labkit.ddp.data_parallel import STRATEGIES, BucketedDDP, FlatDDP, NaiveDDP, trainable

__all__ = ["NaiveDDP", "FlatDDP", "BucketedDDP", "STRATEGIES", "trainable"]
