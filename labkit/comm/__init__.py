"""Collectives written on point-to-point send/recv only, and the bytes they move.

    from labkit.comm import ring_all_reduce, naive_all_reduce, traffic
    ring_all_reduce(t)                          # inside a rank: sum over ranks, in place
    with traffic.measure() as m: ...            # m.sent, m.received: bytes on the wire
    with labkit.comm.record() as rec: ...       # rec.events: which chunk moved where, when

`ring.py` holds the simple versions (one exchange per step) and the naive all-reduce,
`ring_fast.py` the pipelined ring with reused buffers, `formulas.py` the traffic formulas
(pure: imports no torch), `runs.py` recorded ring runs and bytes per rank on a cluster,
`busbw.py` bandwidth in the convention of nccl-tests, `plots.py` the pictures. Names load on first use, so
`import labkit.comm.formulas` stays free of torch. `compat.py` picks the names torch 2.13 gave
two collectives (reduce_scatter_single, all_gather_single) or the older ones.
"""
from labkit._lazy import lazy

_LAZY = {  # name -> submodule that defines it
    "naive_all_reduce": "ring", "ring_all_gather": "ring", "ring_all_reduce_simple": "ring",
    "ring_reduce_scatter": "ring", "ring_all_reduce": "ring_fast",
    "chunk_bounds": "formulas", "record": "recorder",
}
_SUBMODULES = {"formulas", "traffic", "plots", "runs", "busbw", "recorder", "ring", "ring_fast", "compat",
               "objects", "groups"}

__all__ = ["ring_all_reduce", "ring_all_reduce_simple", "ring_reduce_scatter", "ring_all_gather",
           "naive_all_reduce", "chunk_bounds", "record", "traffic", "formulas"]


__getattr__, __dir__ = lazy(__name__, _LAZY, _SUBMODULES)
