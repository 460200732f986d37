"""The memory tricks as data, and what labkit.memory predicts for each (layer 1: pure).

A `Config` is one choice of the five savings of module 09; `predict(config, shape)` gives the
bytes per rank by category from the course's formulas: model state from
`labkit.memory.model_states` (ZeRO paper) with 8-bit moments counted exactly
(`quant8_math`), activations from Korthikanti et al. (`labkit.memory.activations`, without
dropout, as TinyGPT has none). Offload moves the optimizer state into `on_host`.
"""
import itertools
from dataclasses import dataclass, field

from labkit.i18n import N_, tr
from labkit.memory.activations import activations
from labkit.memory.breakdown import Breakdown
from labkit.memory.formulas import model_states
from labkit.tricks import quant8_math

PRECISIONS = ("fp32", "mixed", "autocast", "fp16")
CHECKPOINTING = ("none", "selective", "full")
OPTIMIZERS = ("adam", "adam8bit")
# one letter per trick, for labels on the summary figure
LETTERS = {"mixed": "M", "autocast": "a", "fp16": "H", "full": "C", "selective": "S", "accumulate": "A",
           "adam8bit": "8", "offload": "O", "zero": "Z"}
BASELINE = N_("baseline (fp32, nothing saved)")
WORDS = {"M": N_("mixed precision (bf16 + fp32 masters)"), "a": N_("bf16 autocast"),
         "H": N_("fp16 mixed precision (fp32 masters, loss scaled)"),
         "C": N_("full checkpointing"), "S": N_("selective checkpointing (attention core)"),
         "A": N_("gradient accumulation"), "8": N_("8-bit Adam"), "O": N_("optimizer offload"),
         "Z": N_("ZeRO-1 (optimizer state sharded)")}
# the notes' priority list (显存优化手段优先级), in their order; module 09 measures all but 3
NOTES_PRIORITY = (("mixed", "混合精度 → 直接砍一半激活"),
                  ("checkpointing", "梯度检查点 → 用算力换激活显存"),
                  ("zero", "ZeRO/FSDP 切分 → 砍优化器状态与参数"),
                  ("accumulate", "梯度累积 → 用小 batch 模拟大 batch"),
                  ("adam8bit", "8-bit 优化器 → 优化器状态再砍 4x"))
# the same list in English (for slides: a projector's browser may have no CJK font)
NOTES_PRIORITY_EN = (("mixed", "mixed precision → activations cut in half"),
                     ("checkpointing", "gradient checkpointing → compute for activation memory"),
                     ("zero", "ZeRO/FSDP sharding → cuts optimizer state and parameters"),
                     ("accumulate", "gradient accumulation → a big batch from small ones"),
                     ("adam8bit", "8-bit optimizer → optimizer state 4x smaller again"))


@dataclass(frozen=True)
class Config:
    """One combination of the tricks (every rank runs the same one)."""
    precision: str = "fp32"      # 'fp32' | 'mixed' (bf16 params and grads, fp32 masters) | 'autocast'
    #                              | 'fp16' (as 'mixed' in fp16, with a dynamic loss scaler)
    checkpointing: str = "none"  # 'none' | 'selective' (attention core recomputed) | 'full' (per block)
    micro: int = 1               # micro-batches per step: gradient accumulation when > 1
    optimizer: str = "adam"      # 'adam' (fp32 moments) | 'adam8bit' (block-wise 8-bit moments)
    offload: bool = False        # fp32 master, m and v held in host memory, update on the host
    zero: int = 0                # ZeRO stage of labkit.zero (0 = plain data parallel)

    def __post_init__(self):
        for name, value, valid in (("precision", self.precision, PRECISIONS),
                                   ("checkpointing", self.checkpointing, CHECKPOINTING),
                                   ("optimizer", self.optimizer, OPTIMIZERS)):
            if value not in valid:
                raise ValueError(f"{name} must be one of {valid}, got {value!r}")
        if not isinstance(self.micro, int) or self.micro < 1:
            raise ValueError(f"micro (micro-batches per step) must be a whole number >= 1, got {self.micro!r}")
        if self.zero not in (0, 1, 2):
            raise ValueError(f"zero must be 0, 1 or 2 here, got {self.zero!r}")
        if self.zero and (self.offload or self.precision in ("autocast", "fp16")):
            raise ValueError("ZeRO is measured alone or with mixed precision (bf16) here, not with offload, "
                             "autocast or fp16")
        if self.offload and self.precision == "fp16":
            raise ValueError("offload is measured in fp32 or bf16 here, not fp16")

    @property
    def code(self) -> str:
        """Letters of the tricks on, e.g. 'MC8' ('-' for none)."""
        out = ""
        if self.precision != "fp32":
            out += LETTERS[self.precision]
        if self.checkpointing != "none":
            out += LETTERS[self.checkpointing]
        if self.micro > 1:
            out += "A"
        if self.optimizer == "adam8bit":
            out += "8"
        if self.offload:
            out += "O"
        if self.zero:
            out += "Z"
        return out or "-"

    @property
    def n_tricks(self) -> int:
        return len(self.code.strip("-"))

    def describe(self, local: bool = False) -> str:
        """The tricks in words; `local`: in the learner's language (labkit.i18n) for a table."""
        word = tr if local else (lambda text: text)
        return word(BASELINE) if self.code == "-" else \
            " + ".join(word(WORDS[c]) for c in self.code)


def combinations(micro: int = 4, checkpointing: str = "full") -> list:
    """Every on/off combination of the five tricks (2^5 = 32 configurations); `checkpointing`
    is the mode 'on' means, `micro` the micro-batches 'accumulate' means."""
    out = []
    for mixed, ckpt, acc, q8, off in itertools.product((False, True), repeat=5):
        out.append(Config(precision="mixed" if mixed else "fp32",
                          checkpointing=checkpointing if ckpt else "none",
                          micro=micro if acc else 1, optimizer="adam8bit" if q8 else "adam",
                          offload=off))
    return sorted(out, key=lambda c: (c.n_tricks, c.code))


def singles(micro: int = 4) -> list:
    """The baseline, then each trick alone (selective and full checkpointing both)."""
    return [Config(), Config(precision="mixed"), Config(checkpointing="selective"),
            Config(checkpointing="full"), Config(micro=micro), Config(optimizer="adam8bit"),
            Config(offload=True)]


@dataclass(frozen=True)
class Shape:
    """The transformer and batch the tricks run on (TinyGPT's GPTConfig fields + the batch)."""
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    vocab_size: int = 512
    seq: int = 128
    batch: int = 8               # sequences per rank per step (split into `micro` micro-batches)
    extra: dict = field(default_factory=dict, compare=False)

    def gpt_kwargs(self) -> dict:
        return dict(n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head,
                    vocab_size=self.vocab_size, block_size=self.seq)


def predicted_activations(config: Config, shape: Shape) -> float:
    """Bytes stored for backward at the end of forward of one micro-batch (Korthikanti,
    no dropout): layers x per-layer + output layer (inputs of the final norm and head, fp32
    log-probabilities for the loss). Autocast is not predicted by the formula (mixed dtypes):
    it gets the fp32 number."""
    d = 2 if config.precision in ("mixed", "fp16") else 4
    act = activations(shape.n_layer, shape.n_embd, shape.n_head, shape.seq, shape.batch // config.micro,
                      checkpointing=config.checkpointing, vocab=shape.vocab_size, bytes_per_value=d,
                      dropout=False)
    return act.stored + act.output


def predict(config: Config, n_params: int, shape: Shape, sizes=None, world_size: int = 1) -> Breakdown:
    """Bytes per rank by category: model state (params, grads, master, m, v, 8-bit scales in
    'other') and the activations stored at the end of one micro-batch's forward. fp16 holds what
    bf16 'mixed' holds (2-byte copies, fp32 masters); its loss scaler's scale (4 bytes, a tensor
    outside model and optimizer) is not counted. `sizes`: the
    numel of each trainable tensor, needed for the exact 8-bit state (small tensors stay fp32)."""
    precision = {"fp32": "fp32", "autocast": "fp32", "mixed": "mixed", "fp16": "mixed"}[config.precision]
    b = model_states(n_params, precision=precision, optimizer="adam", zero_stage=config.zero,
                     world_size=world_size)
    master = b.master
    if config.offload and precision == "fp32":
        master = 4 * n_params             # the host keeps its own fp32 copy to update
    parts = dict(params=b.params, grads=b.grads, master=master, momentum=b.momentum,
                 variance=b.variance, other=0)
    if config.optimizer == "adam8bit":
        q = quant8_math.adam8bit_state_bytes(sizes if sizes is not None else [n_params])
        share = 1 / world_size if config.zero else 1
        parts.update({k: v * share for k, v in q.items()})
    on_host = ("master", "momentum", "variance", "other") if config.offload else ()
    return Breakdown(**parts, activations=predicted_activations(config, shape), on_host=on_host,
                     label=f"formula {config.code}")
