"""Mixed precision, two ways, and what each keeps (layer 3).

- 'mixed' (the notes' and the ZeRO paper's): the model's parameters and gradients in bf16,
  an fp32 master copy with fp32 m and v in the optimizer (labkit.zero.masters.MasterOptimizer):
  2 + 2 + 4 + 4 + 4 = 16 bytes per parameter, as many as fp32 Adam (4 + 4 + 4 + 4). Forward and
  backward run in bf16, so every stored activation takes 2 bytes instead of 4: half.
- 'autocast' (`torch.autocast`, what most training scripts use): parameters stay fp32 (they are
  the masters), and selected ops (matmuls, linear layers, attention) cast their inputs to bf16;
  the rest (layer norms, the residual stream, softmax where listed) stays fp32. Model state is
  16 bytes per parameter; activations shrink by less than half (measured in module 09), and
  autocast caches a bf16 copy of each weight for the forward pass.

Micikevicius et al., "Mixed Precision Training" (arXiv 1710.03740).
"""
import contextlib

import torch

from labkit import trace

HALF = torch.bfloat16


def to_mixed(model: torch.nn.Module, optimizer_class, dtype=HALF, **optimizer_kwargs):
    """(model in bf16 (or `dtype`), optimizer on fp32 masters of its parameters): the notes'
    mixed precision. With dtype=torch.float16 the optimizer gets a dynamic loss scaler
    (`opt.loss_scaler`, labkit.tricks.loss_scale.LossScaler): the training loop scales the loss
    and steps through it."""
    from labkit.zero.masters import MasterOptimizer
    opt = MasterOptimizer(model.parameters(), optimizer_class, mixed_precision=True, **optimizer_kwargs)
    if dtype == torch.float16:
        from labkit.tricks.loss_scale import LossScaler
        opt.loss_scaler = LossScaler()
    model.to(dtype)
    return model, opt


def forward_context(precision: str, device_type: str = "cpu"):
    """The context a forward runs in: bf16 autocast for 'autocast', nothing otherwise."""
    if precision == "autocast":
        return torch.autocast(device_type, dtype=HALF)
    return contextlib.nullcontext()


def dtypes_saved(model: torch.nn.Module, x: torch.Tensor, precision: str) -> dict:
    """{dtype: bytes} of the tensors autograd saves for backward in one forward of `model`
    (parameters excluded), to see what each precision stores."""
    with trace.saved_bytes(exclude=model.parameters(), per="storage") as saved, forward_context(precision):
        out = model(x)
    del out
    return saved.by_dtype


def saved_by_dtype(precision: str = "autocast", shape=None) -> dict:
    """Inside a rank: {dtype: bytes} autograd saves in one forward of the module's TinyGPT
    (math attention) under `precision` ('fp32', 'mixed' or 'autocast')."""
    from labkit.toy_models import GPTConfig, TinyGPT, token_batch
    from labkit.tricks.checkpointing import apply
    from labkit.tricks.formulas import Shape
    shape = shape or Shape()
    torch.manual_seed(0)
    model = apply(TinyGPT(GPTConfig(**shape.gpt_kwargs())), "none")
    if precision == "mixed":
        model.to(HALF)
    x, _ = token_batch(shape.batch, shape.seq, shape.vocab_size)
    return dtypes_saved(model, x, precision)


def matmul_seconds(n: int = 256, repeats: int = 9) -> dict:
    """{'float32': [...], 'bfloat16': [...]}: seconds of `repeats` n x n matrix multiplications
    in each dtype, on this process's threads (one untimed call of each first), the two dtypes in
    turns so that a burst of load slows both alike (speed_ratios compares the fastest of each).
    How fast bf16 is depends on the CPU
    (`labkit.machine.bf16_matmul`): faster than fp32 with bf16 instructions (AVX512_BF16, AMX),
    about as fast where oneDNN converts (AVX-512 without them), many times slower where torch
    has only its generic loop (AVX2 CPUs, or ``ONEDNN_MAX_CPU_ISA=AVX2``)."""
    import time
    g = torch.Generator().manual_seed(0)
    # the CPU on purpose: the lesson is this CPU's bf16 kernels (a GPU's tensor cores are another story)
    a, b = torch.randn(n, n, generator=g, device="cpu"), torch.randn(n, n, generator=g, device="cpu")
    pairs = {str(d).replace("torch.", ""): (a.to(d), b.to(d)) for d in (torch.float32, HALF)}
    out = {k: [] for k in pairs}
    for x, y in pairs.values():
        x @ y
    for _ in range(repeats):
        for k, (x, y) in pairs.items():
            t0 = time.perf_counter()
            x @ y
            out[k].append(time.perf_counter() - t0)
    return out


def speed_ratios(times: list) -> list:
    """One ratio per rank from matmul_seconds' results (cluster.run's list): the fastest bf16
    product over the fastest fp32 one. Load only adds time to a repeat, and on a busy machine
    (CI's, a class's node) to most of a handful of them, so the medians can put a native CPU's
    bf16 above fp32's; the fastest repeat of each is the one closest to what the kernel costs."""
    return [min(t["bfloat16"]) / min(t["float32"]) for t in times]


def speed_verdict(ratios: list, kind: str):
    """(ok, text) of notebook 09's bf16 speed check: `ratios` (the fastest bf16 product over the
    fastest fp32 one, one per rank: matmul_seconds) against the band `kind` predicts
    (`labkit.machine.BF16_BANDS`), or (None, text) where no prediction is made (not x86). The
    lesson is worded for this machine."""
    from labkit.machine import bf16_expected
    from labkit.i18n import tr
    lo, hi = min(ratios), max(ratios)
    band = bf16_expected(kind)
    if band is None:
        return None, tr("the fastest bf16 product took {lo:.2f}x to {hi:.2f}x the fastest fp32 one on "
                        "this CPU (no prediction is made for this kind of CPU: this is the measurement)",
                        lo=lo, hi=hi)
    a, b = band
    ok = a < lo and hi < b
    lesson = {"native": tr("with bf16 instructions bf16 is the faster one"),
              "converted": tr("oneDNN converts bf16 to fp32 here: bf16 is about as fast as fp32 or somewhat "
                             "slower, not faster"),
              "generic": tr("without bf16 kernels torch runs a generic loop: bf16 is many times slower")}[kind]
    want = (tr("over {a:g}x", a=a) if b == float("inf") else tr("below {b:g}x", b=b) if a == 0
            else tr("between {a:g}x and {b:g}x", a=a, b=b))
    return ok, tr("{lesson}: the fastest bf16 product took {lo:.2f}x to {hi:.2f}x the fastest fp32 one "
                  "on the ranks (this CPU's kind, {kind}, predicts {want})",
                  lesson=lesson, lo=lo, hi=hi, kind=kind, want=want)
