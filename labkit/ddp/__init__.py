"""Data parallelism (notebook 03): labkit's DDP strategies, measured against torch's.

    from labkit.ddp import NaiveDDP, FlatDDP, BucketedDDP
"""
from labkit.ddp.data_parallel import STRATEGIES, BucketedDDP, FlatDDP, NaiveDDP, trainable

__all__ = ["NaiveDDP", "FlatDDP", "BucketedDDP", "STRATEGIES", "trainable"]
