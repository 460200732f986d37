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
    saved = {}
    seen = set()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t):
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in params and key not in seen:
            seen.add(key)
            saved[str(t.dtype).replace("torch.", "")] = saved.get(str(t.dtype).replace("torch.", ""), 0) + st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), forward_context(precision):
        out = model(x)
    del out
    return saved


def saved_by_dtype(precision: str = "autocast", shape=None) -> dict:
    """Inside a rank: {dtype: bytes} autograd saves in one forward of the module's TinyGPT
    (math attention) under `precision` ('fp32', 'mixed' or 'autocast')."""
    from labkit.models import GPTConfig, TinyGPT, token_batch
    from labkit.tricks.checkpointing import apply
    from labkit.tricks.formulas import Shape
    shape = shape or Shape()
    torch.manual_seed(0)
    model = apply(TinyGPT(GPTConfig(**shape.gpt_kwargs())), "none")
    if precision == "mixed":
        model.to(HALF)
    x, _ = token_batch(shape.batch, shape.seq, shape.vocab_size)
    return dtypes_saved(model, x, precision)


def matmul_seconds(n: int = 256, repeats: int = 5) -> dict:
    """{'float32': [...], 'bfloat16': [...]}: seconds of `repeats` n x n matrix multiplications
    in each dtype, on this process's threads (one untimed call of each first). On a CPU without
    bf16 matrix instructions (AVX512-BF16, AMX) torch has no fast bf16 kernel to call
    (`bf16_fast()` says False) and the bf16 product is many times slower than fp32's."""
    import time
    out = {}
    for dtype in (torch.float32, HALF):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
        a @ b
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        out[str(dtype).replace("torch.", "")] = times
    return out


def bf16_fast() -> bool:
    """Whether oneDNN (torch's CPU kernel library) has bf16 instructions on this CPU."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
