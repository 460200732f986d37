"""Module 09: the notes' memory savings, each alone and together, measured per rank (layer 3).

Pure (no torch): `formulas` (Config, combinations, predict against labkit.memory),
`quant8_math` (the 8-bit code book and the exact bytes of block-wise 8-bit state).
Inside a rank: `precision` (bf16 + fp32 masters, autocast), `checkpointing` (full and
selective, from outside the model), `accumulation`, `quant8` (Adam8bit), `offload`
(optimizer state on the host), `runs` (one configuration trained and measured).
In the notebook: `compare` (every configuration on the cluster, tables, the notes' priority
order checked) and `plots`.
"""
from labkit.tricks.formulas import (LETTERS, NOTES_PRIORITY, NOTES_PRIORITY_EN, WORDS, Config, Shape, combinations,
                                    predict, predicted_activations, singles)

__all__ = ["Config", "Shape", "combinations", "singles", "predict", "predicted_activations",
           "LETTERS", "WORDS", "NOTES_PRIORITY", "NOTES_PRIORITY_EN"]
