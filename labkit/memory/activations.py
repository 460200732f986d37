"""Activation memory of a GPT-style transformer, and "does it fit" (layer 1: pure arithmetic).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, section 4. One layer stores, for backward, with s = sequence, b =
micro-batch, h = hidden, a = heads, t = tensor-parallel degree, 16-bit values and 1-byte
dropout masks:

    no parallelism              s b h (34 + 5 a s / h)                         (eq. 1)
    tensor parallel             s b h (10 + 24 / t + 5 a s / (h t))            (eq. 2)
    tensor + sequence parallel  s b h / t (34 + 5 a s / h)                     (eq. 3)
    selective recomputation     drops the 5 a s / h attention term              (sec. 5)
    full recomputation          keeps only each layer's input: 2 s b h (/ t with SP)

Where the 34 comes from, per layer (bytes per s b h): layer-norm inputs 2 x 2, QKV input 2,
Q and K 4, V 2, attention-projection input 2, MLP input 2, GeLU input 8, second MLP input 8,
two dropout masks 1 + 1. The 10 are the parts tensor parallelism cannot split (layer norms,
the QKV and MLP inputs, the masks); the 24 are split t ways. The attention term is the score
matrix (2 B), its dropout mask (1 B) and dropout output (2 B) per head: 5 a s^2 b.
Here `bytes_per_value` (2 for 16-bit, 4 for fp32) generalises the 16-bit counts.
"""
from dataclasses import dataclass

from labkit.i18n import tr
from labkit.memory.breakdown import GB
from labkit.memory.formulas import _choice, _positive

CHECKPOINTING = ("none", "selective", "full")
GPU_SIZES_GB = (24, 40, 80, 141)     # RTX 4090 / A100 40GB / A100 80GB and H100 / H200


def per_layer(seq: int, micro_batch: int, hidden: int, heads: int, *, tp: int = 1,
              sequence_parallel: bool = False, checkpointing: str = "none",
              bytes_per_value: int = 2, dropout: bool = True) -> float:
    """Bytes one transformer layer keeps for backward (Korthikanti et al., sections 4 and 5).

    dropout=False: a model without dropout (labkit's TinyGPT) keeps no masks (the 2 of the 10)
    and no dropout output after the softmax: 16 d s b h + d a s^2 b bytes per layer for
    d = bytes_per_value (32 s b h + 2 a s^2 b in 16-bit)."""
    for name, v in (("seq", seq), ("micro_batch", micro_batch), ("hidden", hidden),
                    ("heads", heads), ("tp", tp), ("bytes_per_value", bytes_per_value)):
        _positive(name, v, whole=True)
    checkpointing = _choice("checkpointing", checkpointing, CHECKPOINTING)
    s, b, h, a, t, d = seq, micro_batch, hidden, heads, tp, bytes_per_value
    sp = t if sequence_parallel else 1
    if checkpointing == "full":
        return d * s * b * h / sp                   # only the layer's input is kept
    masks = 2 if dropout else 0                     # two 1-byte dropout masks per s b h
    unsplit = (4 * d + masks) * s * b * h / sp      # layer norms, QKV/MLP inputs, masks: 10 at d=2
    split = 12 * d * s * b * h / t                  # Q, K, V, projections, MLP: 24 at d=2
    per_score = (2 * d + 1) if dropout else d       # scores, mask, dropout output: 5 a s^2 b at d=2
    attention = per_score * a * s * s * b / t
    return unsplit + split + (0 if checkpointing == "selective" else attention)


@dataclass(frozen=True)
class Activations:
    """Activation bytes on one rank for a whole model (all layers of one micro-batch)."""
    per_layer: float        # bytes kept per layer until its backward
    layers: int
    stored: float           # per_layer x layers: held at the end of forward
    recompute: float        # extra bytes while one layer is recomputed (full checkpointing)
    output: float           # final layer norm + logits (fp32 for the loss), if vocab was given

    @property
    def peak(self) -> float:
        return self.stored + self.recompute + self.output

    def __repr__(self) -> str:
        return (f"Activations({self.layers} layers x {self.per_layer / GB:.3f} GB + "
                f"recompute {self.recompute / GB:.3f} + output {self.output / GB:.3f} "
                f"= {self.peak / GB:.2f} GB)")


def activations(layers: int, hidden: int, heads: int, seq: int, micro_batch: int, *,
                tp: int = 1, sequence_parallel: bool = False, checkpointing: str = "none",
                vocab: int = 0, bytes_per_value: int = 2, dropout: bool = True) -> Activations:
    """Activation memory of a GPT of `layers` layers on one rank (Korthikanti et al., sec. 4).

    checkpointing: 'none', 'selective' (recompute attention scores only) or 'full' (keep each
    layer's input; during backward one layer at a time is recomputed, so one un-checkpointed
    layer's worth is added as `recompute`). dropout=False: no masks, no dropout output (see
    `per_layer`). `vocab` > 0 adds the output layer's
    4 s b h / t + 4 s b v / t (layer-norm and projection inputs, fp32 logits for the loss).
    """
    _positive("layers", layers, whole=True)
    kw = dict(tp=tp, sequence_parallel=sequence_parallel, bytes_per_value=bytes_per_value,
              dropout=dropout)
    one = per_layer(seq, micro_batch, hidden, heads, checkpointing=checkpointing, **kw)
    recompute = 0.0
    if _choice("checkpointing", checkpointing, CHECKPOINTING) == "full":
        recompute = per_layer(seq, micro_batch, hidden, heads, checkpointing="none", **kw)
    output = (2 * bytes_per_value * seq * micro_batch * hidden + 4 * seq * micro_batch * vocab) / tp \
        if vocab else 0.0
    return Activations(per_layer=one, layers=layers, stored=one * layers, recompute=recompute,
                       output=output)


@dataclass(frozen=True)
class Fit:
    """The answer to "does it fit on this GPU", with the numbers behind it."""
    needed: float           # bytes on the device: model state (minus offload) + activations
    capacity: float         # bytes of the GPU
    model_state: float
    activations: float

    @property
    def fits(self) -> bool:
        return self.needed <= self.capacity

    @property
    def margin(self) -> float:
        """Bytes to spare (>= 0) or missing (< 0)."""
        return self.capacity - self.needed

    def __str__(self) -> str:
        need = tr("needs {need:.1f} GB (model state {state:.1f} + activations {act:.1f})",
                  need=self.needed / GB, state=self.model_state / GB, act=self.activations / GB)
        cap = self.capacity / GB
        gpu = tr("an {gb:g} GB GPU", gb=cap) if _a(cap) == "an" else tr("a {gb:g} GB GPU", gb=cap)
        if self.fits:
            return tr("fits: {need}, {spare:.1f} GB to spare on {gpu}", need=need,
                      spare=self.margin / GB, gpu=gpu)
        return tr("does not fit: {need}, {over:.1f} GB over {gpu} ({x:.2f}x its memory)", need=need,
                  over=-self.margin / GB, gpu=gpu, x=self.needed / self.capacity)

    __repr__ = __str__


def _a(number: float) -> str:
    """'a' or 'an' before a number as it is read: an 80 GB GPU, an 11 GB card, a 24 GB one."""
    whole = f"{number:g}".split(".")[0]
    return "an" if whole.startswith("8") or whole in ("11", "18") or \
        (len(whole) == 5 and whole[:2] in ("11", "18")) else "a"


def fits(model_state, activation_bytes: float = 0.0, gpu_gb: float = 80) -> Fit:
    """Does it fit? `model_state` is a Breakdown (its `.device` bytes count) or bytes."""
    _positive("gpu_gb", gpu_gb)
    dev = model_state.device if hasattr(model_state, "device") else float(model_state)
    act = activation_bytes.peak if hasattr(activation_bytes, "peak") else float(activation_bytes)
    return Fit(needed=dev + act, capacity=gpu_gb * GB, model_state=dev, activations=act)


# GPT shapes (layers, hidden, heads) to attach to a parameter count in the explorer, each with
# where it comes from. GPT-3: Brown et al. 2020 (arXiv 2005.14165), Table 2.1. 530B and 1T:
# Narayanan et al. 2021 (arXiv 2104.04473), Table 1. Two are illustrative fillers.
SHAPES = (
    (24, 2048, 16),      # GPT-3 XL 1.3B: 24 layers, d_model 2048 (the table's 24 heads of 128
                         # do not divide 2048; 16 heads of 128 here)
    (32, 2560, 32),      # GPT-3 2.7B
    (32, 4096, 32),      # GPT-3 6.7B
    (40, 5120, 40),      # GPT-3 13B (the table prints d_model 5140; 40 heads x 128 = 5120)
    (48, 7168, 56),      # illustrative, between GPT-3 13B and 175B: no published model
    (80, 8192, 64),      # illustrative (the shape of Llama 2 70B's released configuration)
    (96, 12288, 96),     # GPT-3 175B
    (105, 20480, 128),   # 530B, Narayanan et al. Table 1
    (128, 25600, 160),   # 1T, Narayanan et al. Table 1
)


def gpt_shape(n_params: float) -> tuple:
    """(layers, hidden, heads) of a GPT with about n_params parameters (12 L h^2 per layer).

    The hidden size and heads come from the nearest published shape; the layer count is then
    solved from n_params ~= 12 L h^2 so that the shape matches the count within one layer.
    """
    _positive("n_params", n_params)
    _, h, a = min(SHAPES, key=lambda s: abs(12 * s[0] * s[1] ** 2 - n_params))
    return max(1, round(n_params / (12 * h * h))), h, a
