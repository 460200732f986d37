"""Module 14, the capstone: one trainer over a small GPT and real text with data, tensor and
pipeline parallelism at once, built from the course's own pieces, against one process.

    from labkit.capstone import Config, reference, train, loss_bounds
    cfg = Config()                                  # byte-level TinyGPT: 4 layers, width 32, 4 heads
    ref = reference(cfg, steps=3)                   # one process: {"losses", "scales", ...}
    res = cluster.run(train, cfg, dp=2, pp=2, tp=2, steps=3)     # 8 ranks, every rank's dict
    res[0]["losses"]                                # the global batch's loss per step (all ranks agree)
    loss_bounds(cfg, ref, dp=2, pp=2, tp=2)         # per step: the most they may differ (derived)
    cluster.run(train, cfg, dp=2, pp=2, tp=2, wrong="loss not divided by micro-batches")
    curves_figure(ref["losses"], {"2 x 2 x 2": res[0]["losses"]}, loss_bounds(cfg, ref))  # plots.py

The data (`data.py`): the bytes of a standard-library source file every Python has
(`textwrap.py`), tokens 0..255; step k's global batch is `cfg.batch` windows of `cfg.seq + 1`
bytes at offsets fixed by k, the same on every rank and in the reference.

The model (`model.py`): `labkit.toy_models.TinyGPT` (untied head: the embedding lives on the first
stage, the head on the last), written for one process and parallelised from outside in
torchtitan's order: the pipeline split first (`stage_of`: embeddings + the first blocks on stage
0, the last blocks + ln_f + head on the last), then tensor parallelism (`labkit.tp.TPBlock` on each
block of the stage over the TP group), then data parallelism (the gradients of every parameter
averaged over the DP group in one flat all-reduce after the pipeline's backward; `zero=True`:
ZeRO-2 by hand instead, the gradient reduce-scattered over DP, each DP rank stepping its shard,
an all-gather putting the parameters back). `sequence_parallel=True`: TPBlock's sequence
parallelism, each TP rank holding s / t positions between the TP regions, so the replicated
parameters' gradients (embeddings, norms, row-parallel biases, head) are summed over TP: the
rule notebook 14's exercise states (without it they are already equal on the TP ranks).

The groups (`trainer.groups`) come from one grid, `labkit.nd.layout.Layout(dp, pp, tp)` in the
notes' order (TP fastest, then PP, DP outermost: picotron's `torch.arange(world).view(dp, pp, tp)`),
which validates the layout; the pipeline's point-to-point peers are `Layout.rank_of`.

The step (`trainer.train`): the DP rank's rows of the global batch cut into `cfg.microbatches`
micro-batches, run by a `labkit.pipeline.one_f_one_b` schedule (each micro-batch's loss divided by
the micro-batch count); the DP all-reduce; the global gradient norm (`labkit.nd.clipping.
global_grad_norm`: TP-split weights summed over TP, TP replicas counted once, stages summed over PP)
and torch's clip rule; an SGD step. `reference` is the same on one process (torch's
`clip_grad_norm_`).

The bounds (`bounds.py`, labkit.numerics, never tuned): the gradient within chain_bound of its
reductions (scale: the largest gradient one process computes), the clipped gradient and the
parameters after k SGD steps (sgd_bound), and the loss at step k within the forward's chain_bound
plus |grad|_1 times the parameters' bound (first order).

The wrong variants (`WRONG`), each a bug that raises nothing:
- "loss not divided by micro-batches": the pipeline sums m micro-batch means;
- "clip norm summed over TP": the replicated parameters' squares counted on every TP rank;
- "no DP reduction": each DP replica steps on its own rows' gradient;
- `WRONG_SP` "replicated gradients not summed over TP" (with sequence_parallel=True).
Clipping at every step hides a gradient summed instead of averaged from the loss (it rescales
the step); `bounds.norm_bound` catches it in step 0's gradient norm.

Context parallelism as a fourth dimension (`cp.py`: `cp.train(cfg, dp, pp, tp, cp, ...)`, the
sequence zig-zag sharded, ring attention in each block, gradients averaged over DP x CP, the wrong
variant "no CP reduction") and a torch.distributed.checkpoint saved under one layout and resumed
under another (`checkpoint.py`; `cp.train(..., save_at=k, ckpt=path)`, then `resume=path`) reuse
this trainer's step.
"""
from labkit._lazy import lazy

_LAZY = {
    "Config": "model", "build": "model", "stage_of": "model",
    "text_bytes": "data", "global_batch": "data",
    "groups": "trainer", "train": "trainer", "reference": "trainer", "WRONG": "trainer",
    "WRONG_SP": "trainer",
    "loss_bounds": "bounds",
    "curves_figure": "plots",
}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy(__name__, _LAZY)
