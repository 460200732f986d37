"""python -m labkit.bench memory [--batch B] [--seq S] [--device cpu|cuda]

One TinyGPT training step in one process: `labkit.memory.measure` against the formula
(model state, exact in bytes) and the step's peak by category. On a CUDA device it also
compares `measure` with the CUDA caching allocator (`torch.cuda.memory_allocated`), which
must agree to the byte for the model state when nothing else is allocated; that path has not
been run on the course's CPU machines (untested here).
"""
import argparse
import time


def main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.bench memory")
    ap.add_argument("--batch", type=int, default=2, help="sequences per step")
    ap.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto")
    args = ap.parse_args(argv)
    import torch

    import labkit.memory as M
    from labkit.toy_models import TinyGPT, lm_loss, token_batch
    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                       else ("cpu" if args.device == "auto" else args.device))
    torch.manual_seed(0)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)           # bytes before the model exists
    model = TinyGPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = (t.to(dev) for t in token_batch(args.batch, args.seq, model.cfg.vocab_size))

    def step():
        lm_loss(model(x), y).backward()
        opt.step()

    t0 = time.perf_counter()
    pk = M.peak(step, model, opt, x, y)
    t_step = time.perf_counter() - t0
    t0 = time.perf_counter()
    held = M.measure(model, opt, label="measured")
    t_measure = time.perf_counter() - t0
    psi = M.count_params(model)
    formula = M.model_states(psi, precision="fp32", optimizer="adamw")
    print(f"TinyGPT, {psi:,} parameters, FP32 AdamW, batch {args.batch} x seq {args.seq}, {dev}")
    print(M.table([held], formula))
    print(f"measure() took {1e3 * t_measure:.2f} ms; the step under {pk.how} {t_step:.2f} s")
    print(f"peak of the step: {pk.total:,} B  ({pk.at_peak})")
    ok = all(getattr(held - formula, c) == 0 for c in ("params", "grads", "momentum", "variance"))
    print(f"params, grads, m, v equal the formula to the byte: {ok}")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()                                        # cuBLAS workspaces live in the allocator too
        inputs = x.untyped_storage().nbytes() + y.untyped_storage().nbytes()
        if x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr():
            inputs //= 2                                   # x and y are views of one tensor
        alloc = torch.cuda.memory_allocated(dev) - base - inputs
        # AdamW keeps its `step` counters on the CPU (not fused, not capturable): held.device
        print(f"CUDA allocator: {alloc:,} B held beyond the batch; measure() on the device: "
              f"{held.device:,} B; difference {alloc - held.device:+,} B (the allocator rounds each "
              "block up to a multiple of 512 B)")
        ok = ok and 0 <= alloc - held.device <= 512 * 4 * len(list(model.parameters()))
    return 0 if ok else 1
