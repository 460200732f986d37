"""What the attention blocks did on this rank during a call, measured from outside
(labkit/trace.py): score entries (per batch and head), seconds in attend and attend_backward,
blocks, and the largest score block held at once.

    with block_stats() as stats:
        attention(q, k, v, group=group, causal=True)
    stats["largest block"]                # filled when the block ends

A recorder that keeps only cp/blocks.py's "block" spans, so it may be turned on inside another
(cp/runs.traced_step's ring timeline).
"""
import contextlib

from labkit import trace


@contextlib.contextmanager
def block_stats():
    rec = trace.Recorder(names={"block"})
    stats = {"score entries": 0, "compute seconds": 0.0, "blocks": 0, "largest block": 0}
    with trace.recording(rec):
        yield stats
    for _, t0, t1, tags in rec.resolved():
        stats["score entries"] += tags["entries"]
        stats["largest block"] = max(stats["largest block"], tags["entries"])
        stats["compute seconds"] += t1 - t0
        stats["blocks"] += 1
