"""Tensor parallelism written by hand (Megatron-LM's f and g), and the same with DTensor.

    from labkit.tp import ColumnParallelLinear, RowParallelLinear, TPBlock
    TPBlock(block, group)                      # a labkit.toy_models.Block split over the TP group
    cluster.run(labkit.tp.block_parity)        # max |diff| against one device, per rank

comms.py (f, g and the sequence-parallel pair), layers.py (column / row linears),
blocks.py (MLP, attention, block), parity.py (runs on ranks against one device: the blocks, and
the vocabulary split beside torch's loss_parallel), dtensor_tp.py (PyTorch's
`parallelize_module`), two_d.py (FSDP2 x TP on a 2-D mesh), vocab.py (vocabulary-parallel embedding and
loss-parallel cross-entropy), split.py (what a rank's share is: FLOPs, weights, the logits and
what the loss keeps), plots.py (its picture), gqa.py (grouped-query attention with K/V heads
replicated when t > kv).
"""
from labkit._lazy import lazy

_LAZY = {
    "copy_to_tp": "comms", "reduce_from_tp": "comms", "scatter_seq": "comms", "gather_seq": "comms",
    "ColumnParallelLinear": "layers", "RowParallelLinear": "layers", "shard_rows": "layers",
    "TPMLP": "blocks", "TPAttention": "blocks", "TPBlock": "blocks", "parallelize_blocks": "blocks",
    "sync_sequence_parallel_grads": "blocks",
    "block_parity": "parity", "block_traffic": "parity", "saved_activation_bytes": "parity",
    "reference_blocks": "parity",
    "dtensor_blocks": "dtensor_tp", "dtensor_parity": "dtensor_tp", "dtensor_sp_traffic": "dtensor_tp",
    "dtensor_comm_counts": "dtensor_tp",
    "two_d_parity": "two_d",
    "VocabParallelEmbedding": "vocab", "vocab_parallel_cross_entropy": "vocab",
    "GQAttention": "gqa", "TPGQAttention": "gqa", "sync_kv_replica_grads": "gqa",
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy(__name__, _LAZY)
