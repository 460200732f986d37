"""Collectives written on point-to-point send/recv only, and the bytes they move.

    from labkit.comm import ring_all_reduce, naive_all_reduce, traffic
    ring_all_reduce(t)                          # inside a rank: sum over ranks, in place
    with traffic.measure() as m: ...            # m.sent, m.received: bytes on the wire
    with labkit.comm.record() as rec: ...       # rec.events: which chunk moved where, when

`ring.py` holds the simple versions (one exchange per step) and the naive all-reduce,
`ring_fast.py` the pipelined ring with reused buffers, `formulas.py` the traffic formulas,
`draw.py` the pictures.
"""
from labkit.comm import formulas, traffic
from labkit.comm.formulas import chunk_bounds
from labkit.comm.recorder import record
from labkit.comm.ring import (naive_all_reduce, ring_all_gather, ring_all_reduce_simple,
                              ring_reduce_scatter)
from labkit.comm.ring_fast import ring_all_reduce

__all__ = ["ring_all_reduce", "ring_all_reduce_simple", "ring_reduce_scatter", "ring_all_gather",
           "naive_all_reduce", "chunk_bounds", "record", "traffic", "formulas"]
