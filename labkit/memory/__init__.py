"""Why a model does not fit: memory computed by formula and measured on each rank.

Formulas (pure arithmetic, importable without torch):
    model_states(7e9)                        # the notes' table: 14+14+28+28+28 = 112 GB
    model_states(7.5e9, zero_stage=2, world_size=64)   # ZeRO paper: 16.6 GB per GPU
    activations(layers, hidden, heads, seq, micro_batch, tp=..., checkpointing=...)
    fits(model_states(...), activations(...), gpu_gb=80)
Measured on a rank (import torch on first use):
    measure(model, optimizer)                # exact bytes by category on this rank
    peak(step, model, optimizer, *batch)     # peak over one training step, activations included
    per_rank(cluster, fn); table(breakdowns, formula)
Pictures: plot_ranks(breakdowns, formula), explorer(), explorer_figure(...).
"""
from labkit._lazy import lazy
from labkit.memory.activations import (CHECKPOINTING, GPU_SIZES_GB, SHAPES, Activations, Fit,
                                       activations, fits, gpt_shape, per_layer)
from labkit.memory.breakdown import CATEGORIES, GB, GiB, Breakdown, category_help, fmt_bytes
from labkit.memory.formulas import (OPTIMIZERS, PRECISIONS, ZERO_PAPER_EXAMPLE, ZERO_STAGES,
                                    bytes_per_param, deepspeed_estimate, model_states,
                                    optimizer_share, weights_bytes, world_size_for_savings,
                                    zero_paper_example, zero_savings, zero_savings_limit,
                                    zero_table)

_LAZY = {  # name -> submodule; these import torch or matplotlib, so only on first use
    "measure": "accounting", "count_params": "accounting", "local_tensor": "accounting",
    "gather": "accounting", "per_rank": "accounting", "table": "accounting",
    "label_ranks": "accounting",
    "peak": "peaks", "Peak": "peaks",
    "plot_ranks": "plots", "plot_breakdown": "plots", "explorer_figure": "plots",
    "explorer": "widgets",
}

__all__ = ["Breakdown", "CATEGORIES", "GB", "GiB", "category_help", "fmt_bytes",
           "PRECISIONS", "OPTIMIZERS", "ZERO_STAGES", "ZERO_PAPER_EXAMPLE", "bytes_per_param",
           "model_states", "weights_bytes", "optimizer_share", "zero_savings",
           "zero_savings_limit", "world_size_for_savings", "zero_table", "zero_paper_example",
           "deepspeed_estimate", "CHECKPOINTING", "GPU_SIZES_GB", "SHAPES", "Activations", "Fit",
           "activations", "per_layer", "fits", "gpt_shape", *_LAZY]

__getattr__, __dir__ = lazy(__name__, _LAZY)
