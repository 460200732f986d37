"""The GPU path of labkit, in one short run (for a machine with at least one CUDA GPU).

    .venv/bin/python scripts/gpu_check.py            # on a machine with a CUDA GPU (about 2 minutes)
    .venv/bin/python scripts/gpu_check.py --cpu      # the same strategy checks on gloo, CPU, world size 1

Part 1, the runtime: backend="auto" picks NCCL; set_device is done for the learner; a CUDA
tensor goes through every collective at world size 1; results come back on the CPU; a rank
error and a timeout (stack dump, kill, spare promotion) work on NCCL ranks. Then GPUs given by a
spawner (CUDA_VISIBLE_DEVICES, in fresh processes): each rank computes on the GPU it was given
(matched by UUID), more ranks than given GPUs fall back to gloo with the line that says why,
none given is gloo, and backend="nccl" with too few refuses naming the variable. One line per
check; it stops at the first failure.

Part 2, every module's strategy once on the device (world size 1, NCCL on CUDA): DDP (naive,
flat, bucketed), ZeRO 1-3, FSDP2, tensor parallelism, a pipeline schedule (1F1B), ring
attention (zig-zag, causal), the MoE layer with expert parallelism, bf16 mixed precision and fp16
with loss scaling; each against one process on the same device. Then CUDA memory against
labkit's formulas: `torch.cuda.memory_allocated` after a step equals the blocks of the model
state's storages rounded up to the caching allocator's 512 bytes
(`labkit.memory.formulas.cuda_block_bytes`), and `labkit.memory.measure`'s exact bytes equal
`model_states` (fp32 Adam, bf16 mixed, ZeRO-2). One line per check, ``ok:`` or ``MISS:`` with
the numbers, all of them printed before the exit.

`--cpu` runs part 2 alone on gloo on the CPU, world size 1: the same calls into labkit with the
same arguments (only the CUDA allocator's reading is skipped), so a signature that changed is
found without a GPU (tests/gpu/test_gpu_check.py runs it). Exit status: 0 every check ok; 1 a check
failed (its line says which); 2 no CUDA device, nothing checked (without --cpu). CI has no GPU:
the GPU run is by hand where one is lent.
"""
import json
import os
import subprocess
import sys
import time

import torch

import labkit


def collectives():
    import torch.distributed as dist
    dev = labkit.device()
    assert dev.type == "cuda" and torch.cuda.current_device() == dev.index, (dev, torch.cuda.current_device())
    t = torch.arange(4.0, device=dev)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    out = torch.empty(4, device=dev)
    dist.reduce_scatter(out, [t])
    parts = [torch.empty(4, device=dev)]
    dist.all_gather(parts, out)
    dist.barrier()
    return {"device": str(dev), "backend": dist.get_backend(), "sum": parts[0].sum().item(), "tensor": parts[0]}


def fails():
    raise ValueError("on purpose, on a GPU rank")


def hangs():
    time.sleep(60)


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        sys.exit(1)


def main():
    check("cuda available", torch.cuda.is_available(), f"({torch.cuda.device_count()} GPUs, torch {torch.__version__})")
    with labkit.Cluster(1) as c:
        check("auto backend is nccl", c.backend == "nccl", repr(c))
        r = c.run(collectives)[0]
        check("collectives on a CUDA tensor", r["sum"] == 6.0 and r["backend"] == "nccl", str(r["device"]))
        check("results come back on the CPU", r["tensor"].device.type == "cpu")
        try:
            c.run(fails)
            check("rank error on nccl", False)
        except labkit.RankError as e:
            check("rank error on nccl", "on purpose" in str(e))
        c.wait_for_spares(120)
        t0 = time.monotonic()
        try:
            c.run(hangs, timeout=2)
            check("timeout on nccl", False)
        except labkit.RankTimeout as e:
            check("timeout on nccl", "in hangs" in str(e), f"after {time.monotonic() - t0:.1f} s")
        t0 = time.monotonic()
        r = c.run(collectives)[0]
        check("works again after the timeout", r["sum"] == 6.0, f"in {time.monotonic() - t0:.2f} s")


def _uuid(index: int) -> str:
    return str(torch.cuda.get_device_properties(index).uuid)


def _rank_gpu():
    """On a rank: the UUID of the GPU it computes on."""
    return _uuid(torch.cuda.current_device()) if labkit.device().type == "cuda" else "cpu"


def given_child(world_size: int, backend: str) -> None:
    """In a process started with CUDA_VISIBLE_DEVICES set: one cluster, what it chose, where each
    rank computed, as JSON on the last line (the learner's line goes to stderr)."""
    try:
        with labkit.Cluster(world_size, backend=backend, spares=0) as c:
            out = {"backend": c.backend, "gpus": c.run(_rank_gpu), "repr": repr(c)}
    except ValueError as exc:
        out = {"error": str(exc)}
    print(json.dumps(out))


def _given(cvd: str, world_size: int, backend: str = "auto"):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": cvd}
    r = subprocess.run([sys.executable, __file__, "--given", str(world_size), backend], env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        check(f"a cluster under CUDA_VISIBLE_DEVICES={cvd!r} ran", False, r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def given_gpus():
    """GPUs shared by a class: the ranks use only the GPUs in CUDA_VISIBLE_DEVICES."""
    n = torch.cuda.device_count()
    physical = [_uuid(i) for i in range(n)]
    last = str(n - 1)
    out, err = _given(last, 1)
    check(f"CUDA_VISIBLE_DEVICES={last}: nccl on that GPU", out["backend"] == "nccl"
          and out["gpus"] == [physical[-1]], f"{out['gpus']} ({out['repr']})")
    if n >= 2:
        out, err = _given("1,0", 2)
        check("CUDA_VISIBLE_DEVICES=1,0: rank 0 on GPU 1, rank 1 on GPU 0",
              out["gpus"] == [physical[1], physical[0]], str(out))
    out, err = _given(last, 2)
    check("2 ranks, 1 GPU given: gloo, and the line says why", out["backend"] == "gloo"
          and "2 ranks but only 1 GPU(s) visible" in err and out["gpus"] == ["cpu", "cpu"], err.strip())
    out, err = _given("", 2)
    check("no GPU given: gloo, and the line says so", out["backend"] == "gloo"
          and "no GPU is visible" in err, err.strip())
    out, err = _given(last, 2, "nccl")
    check("backend='nccl' with too few given GPUs refuses", "CUDA_VISIBLE_DEVICES" in out.get("error", ""),
          out.get("error", str(out)))


# -- part 2: every module's strategy once on this rank's device --------------------------------
EPS32 = torch.finfo(torch.float32).eps


def bound(reference, terms: int) -> float:
    """How far two computations of the same values may drift when they sum up to `terms` terms
    in different orders (ring blocks against one kernel, a flat buffer against per-tensor
    kernels): Higham's bound for recursive summation, terms x eps relative to the largest
    value, with eps fp32's 2^-23. At world size 1 the collectives copy or sum one term, so this
    is the whole difference a correct strategy can show; a wrong one (a gradient not averaged,
    a shard misplaced, a step not taken) is off by the size of the values themselves."""
    big = max(float(t.detach().abs().max()) for t in reference) if isinstance(reference, (list, tuple)) \
        else float(reference.detach().abs().max())
    return terms * EPS32 * max(big, 1.0)


def _row(name, ok, detail):
    return {"name": name, "ok": bool(ok), "detail": detail}


def _diff(a: dict, b: dict) -> tuple:
    worst, where = 0.0, None
    for k, t in a.items():
        d = float((t.detach().float() - b[k].detach().float()).abs().max())
        if where is None or d > worst:
            worst, where = d, k
    return worst, where


def _awkward(dev, seed=0):
    from labkit.toy_models import AwkwardNet
    torch.manual_seed(seed)
    return AwkwardNet().to(dev)


def _awkward_data(dev, batch=4, seed=1000):
    from labkit.toy_models import awkward_batch
    return tuple(t.to(dev) for t in awkward_batch(batch, seed=seed))


def _tiny_gpt(dev, seed=0):
    from labkit.toy_models import GPTConfig, TinyGPT
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)).to(dev)


def _tokens(dev, batch=2, seq=16, vocab=64):
    from labkit.toy_models import token_batch
    return tuple(t.to(dev) for t in token_batch(batch, seq, vocab))


def check_ddp(dev) -> list:
    import copy
    from labkit.ddp import STRATEGIES
    from labkit.toy_models import lm_loss
    rows = []
    for name in ("naive", "flat", "bucketed"):
        model = _awkward(dev)
        ref = copy.deepcopy(model)
        ddp = STRATEGIES[name](model)
        x, y = _awkward_data(dev)
        for net in (ddp, ref):
            lm_loss(net(x), y).backward()
        ddp.sync_gradients()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        want = {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}
        d, where = _diff(grads, want)
        tol = bound(list(want.values()), 1)          # world size 1: the average of one gradient
        rows.append(_row(f"DDP {name}: gradients after sync", d <= tol and grads.keys() == want.keys(),
                         f"max |diff| {d:.2e} at {where} (bound {tol:.1e})"))
    return rows


def check_zero(dev) -> list:
    from labkit.toy_models import lm_loss
    from labkit.zero import wrap
    from labkit.zero.parity import OneProcess, full_params
    rows = []
    for stage in (1, 2, 3):
        ref = OneProcess(_awkward(dev), torch.optim.Adam, lr=1e-2)
        wrapped, opt = wrap(_awkward(dev), torch.optim.Adam, stage=stage, lr=1e-2)
        x, y = _awkward_data(dev)
        lm_loss(ref.model(x), y).backward()
        ref.step()
        lm_loss(wrapped(x).float(), y).backward()
        opt.step()
        opt.zero_grad()
        got = {k[len("module."):] if k.startswith("module.") else k: t for k, t in full_params(wrapped).items()}
        want = dict(ref.model.named_parameters())
        d, where = _diff(got, want)
        # Adam's step is lr x m/(sqrt(v)+eps): the flat buffer and per-tensor kernels round each
        # of its ~10 operations alike up to an ulp: 16 ulps of the largest weight
        tol = bound(list(want.values()), 16)
        rows.append(_row(f"ZeRO-{stage}: parameters after one Adam step", d <= tol,
                         f"max |diff| {d:.2e} at {where} (bound {tol:.1e})"))
    return rows


def check_fsdp2(dev) -> list:
    import copy
    from labkit.fsdp import shard
    from labkit.toy_models import lm_loss
    model = _tiny_gpt(dev)
    ref = copy.deepcopy(model)
    shard(model, wrap="block", strategy="full")
    x, y = _tokens(dev)
    for net in (model, ref):
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        lm_loss(net(x), y).backward()
        opt.step()
    got = {n: (p.full_tensor() if hasattr(p, "full_tensor") else p) for n, p in model.named_parameters()}
    want = dict(ref.named_parameters())
    d, where = _diff(got, want)
    tol = bound(list(want.values()), 16)             # as ZeRO: one Adam step, another kernel
    return [_row("FSDP2 (fully_shard, per block): parameters after one Adam step", d <= tol,
                 f"max |diff| {d:.2e} at {where} (bound {tol:.1e})")]


def check_tp(dev) -> list:
    import copy
    from labkit.toy_models import Block, GPTConfig
    from labkit.tp import TPBlock
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=4, n_embd=32)
    block = Block(cfg).to(dev)
    tp = TPBlock(copy.deepcopy(block))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 16, 32, generator=g).to(dev)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, want = tp(xa), block(xb)
    out.sum().backward()
    want.sum().backward()
    d_out = float((out - want).detach().abs().max())
    d_in = float((xa.grad - xb.grad).abs().max())
    tol = bound(want, 4 * cfg.n_embd)                # the longest sum: the MLP's 4h hidden units
    return [_row("TP block (column + row parallel): output and input gradient", max(d_out, d_in) <= tol,
                 f"max |diff| output {d_out:.2e}, input grad {d_in:.2e} (bound {tol:.1e})")]


def check_pipeline(dev) -> list:
    from labkit.pipeline import one_f_one_b
    from labkit.pipeline.executor import run_schedule
    r = run_schedule(one_f_one_b(1, 4), layers=4, width=32, live=False, warmup=0)
    tol = 4 * 4 * EPS32 * 32       # 4 micro-batches summed in another order, |grad| below ~32
    return [_row("pipeline 1F1B (1 stage, 4 micro-batches): gradients", r["grad_diff"] <= tol and not r["grad_mismatch"],
                 f"max |diff| {r['grad_diff']:.2e} (bound {tol:.1e}), missing or extra {r['grad_mismatch']}")]


def check_ring_attention(dev) -> list:
    from labkit.cp.parity import attention_parity
    seq = 16
    d = attention_parity(seq=seq, causal=True, method="ring", layout="zigzag")
    tol = bound(torch.tensor(4.0), seq)   # sums over 16 keys; q, k, v, dout are N(0,1): below ~4
    worst = max(d, key=d.get)
    return [_row("ring attention (zig-zag, causal): output, dq, dk, dv", d[worst] <= tol,
                 f"max |diff| {d[worst]:.2e} in {worst} (bound {tol:.1e})")]


def check_moe(dev) -> list:
    import copy
    from labkit.moe import expert_parallel
    from labkit.moe.parity import build
    moe = build(hidden=16, ffn_hidden=32, experts=4, k=2).to(dev)
    ep = expert_parallel(copy.deepcopy(moe))
    g = torch.Generator().manual_seed(1)
    x, w = (torch.randn(12, 16, generator=g).to(dev) for _ in range(2))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ep(xa), moe(xb)
    ((ya * w).sum() + ep.aux_loss).backward()
    ((yb * w).sum() + moe.aux_loss).backward()
    d = {"output": float((ya - yb).detach().abs().max()), "input grad": float((xa.grad - xb.grad).abs().max())}
    want = dict(moe.named_parameters())
    for name, p in ep.named_parameters():            # world size 1: every expert is this rank's
        d[name] = float((p.grad - want[name].grad).abs().max())
    worst = max(d, key=d.get)
    tol = bound([yb, *(p.grad for p in want.values())], 32)   # sums over the experts' 32 hidden units
    return [_row("MoE layer, expert parallel (top-2, 4 experts): output and gradients", d[worst] <= tol,
                 f"max |diff| {d[worst]:.2e} in {worst} (bound {tol:.1e})")]


def check_precision(dev) -> list:
    from labkit.memory import measure, model_states, count_params
    from labkit.toy_models import lm_loss
    from labkit.tricks import fp16
    from labkit.tricks.loss_scale import LossScaler
    from labkit.tricks.precision import to_mixed
    rows = []
    model, opt = to_mixed(_tiny_gpt(dev), torch.optim.Adam, dtype=torch.bfloat16, lr=1e-3)
    x, y = _tokens(dev)
    losses = []
    for _ in range(3):
        loss = lm_loss(model(x).float(), y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    n = count_params(model)
    held, want = measure(model, opt), model_states(n, precision="mixed", optimizer="adam")
    same = all(getattr(held, c) == getattr(want, c) for c in ("params", "master", "momentum", "variance"))
    rows.append(_row("bf16 mixed precision: trains, state in bytes as the formula (2 + 4 + 4 + 4 per parameter "
                     "after zero_grad)", same and losses[-1] < losses[0] and model.head.weight.dtype == torch.bfloat16,
                     f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; params {held.params:,} B (formula {want.params:,.0f}), "
                     f"master {held.master:,} B, m {held.momentum:,} B, v {held.variance:,} B"))
    bare = fp16.underflow(None, steps=3)
    scaled = fp16.underflow(LossScaler(2.0 ** 16, dynamic=False), steps=3)
    dyn = fp16.underflow(LossScaler(2.0 ** 36, growth_interval=3), steps=6)
    ok = (bare["underflowed"][0] == bare["n"] and max(scaled["underflowed"]) <= 0.01 * scaled["n"]
          and scaled["loss"][-1] < scaled["loss"][0] and dyn["skipped"][0] and dyn["scale"][1] == dyn["scale"][0] / 2)
    rows.append(_row("fp16 with loss scaling: unscaled gradients underflow, S = 2^16 trains, dynamic S halves "
                     "on overflow", ok,
                     f"underflowed to 0: {bare['underflowed'][0]} of {bare['n']} unscaled, {max(scaled['underflowed'])} "
                     f"scaled; loss {scaled['loss'][0]:.2e} -> {scaled['loss'][-1]:.2e}; dynamic S "
                     f"{dyn['scale'][0]:.3g} -> {dyn['scale'][1]:.3g} after a skip"))
    return rows


def _storages(model, opt) -> list:
    """Bytes of every distinct storage of the model state on the device (params, grads,
    optimizer state, labkit's flat buffers)."""
    seen, sizes = set(), []

    def add(t):
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            t = t.to_local() if hasattr(t, "to_local") else t
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                sizes.append(st.nbytes())
    for p in model.parameters():
        add(p)
        add(p.grad)
    for g in opt.param_groups:
        for p in g["params"]:
            add(p)
            add(p.grad)
    for state in opt.state.values():
        for v in state.values():
            add(v)
    for source in (model, opt):
        for _, t in getattr(source, "labkit_memory", tuple)():
            add(t)
    return sizes


def check_memory(dev) -> list:
    """CUDA memory after one step (gradients kept) against the formula and the allocator's
    rounding; on the CPU, measure() against the formula alone."""
    from labkit.memory import count_params, measure, model_states
    from labkit.memory.formulas import cuda_block_bytes
    from labkit.toy_models import lm_loss
    from labkit.tricks.precision import to_mixed
    from labkit.zero import wrap
    cuda = dev.type == "cuda"
    rows = []
    x, y = _tokens(dev)
    _tiny_gpt(dev)(x).sum().backward()               # cuBLAS handles and workspaces exist first
    cases = (("fp32 Adam", "fp32", lambda: (lambda m: (m, torch.optim.Adam(m.parameters(), lr=1e-3)))(_tiny_gpt(dev)), 0),
             ("bf16 mixed, fp32 masters", "mixed",
              lambda: to_mixed(_tiny_gpt(dev), torch.optim.Adam, dtype=torch.bfloat16, lr=1e-3), 0),
             ("ZeRO-2, fp32 Adam", "fp32", lambda: wrap(_tiny_gpt(dev), torch.optim.Adam, stage=2, lr=1e-3), 2))
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None) if cuda else None
    for name, precision, make, stage in cases:
        if cuda:
            torch.cuda.synchronize(dev)
            if clear is not None:
                clear()                              # cuBLAS workspaces live in the allocator too
            base = torch.cuda.memory_allocated(dev)
        model, opt = make()
        out = lm_loss(model(x).float(), y)
        out.backward()
        opt.step()
        del out
        n = count_params(model)
        held = measure(model, opt)
        want = model_states(n, precision=precision, optimizer="adam", zero_stage=stage)
        cats = ("params", "grads", "master", "momentum", "variance")
        exact = all(getattr(held, c) == getattr(want, c) for c in cats)
        detail = (f"measure() {held.model_state:,} B, formula {want.model_state:,.0f} B for {n:,} parameters "
                  f"({', '.join(f'{c} {getattr(held, c):,}' for c in cats if getattr(held, c))})")
        ok = exact
        if cuda:
            torch.cuda.synchronize(dev)
            if clear is not None:
                clear()
            got = torch.cuda.memory_allocated(dev) - base
            blocks = cuda_block_bytes(_storages(model, opt))
            ok = ok and got == blocks
            detail += f"; memory_allocated {got:,} B, the storages in 512 B blocks {blocks:,} B"
        rows.append(_row(f"memory, {name}: model state as the formula", ok, detail))
        del model, opt
    return rows


CHECKS = (check_ddp, check_zero, check_fsdp2, check_tp, check_pipeline, check_ring_attention, check_moe,
          check_precision, check_memory)


def strategy_checks() -> list:
    """On the rank: every check, each caught so that one failure does not hide the others."""
    import traceback
    dev = labkit.device()
    rows = []
    for fn in CHECKS:
        t0 = time.perf_counter()
        try:
            got = fn(dev)
        except Exception as exc:                     # one line, with where it failed
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            got = [_row(fn.__name__, False, f"raised {type(exc).__name__}: {exc} ({tb.filename.split('/')[-1]}:{tb.lineno})")]
        for r in got:
            r["seconds"] = time.perf_counter() - t0
        rows += got
    return rows


def print_rows(rows: list) -> bool:
    """One line per check, ``ok:`` or ``MISS:`` with its numbers; True if all are ok."""
    from labkit.verdict import verdict
    return all([verdict(r["ok"], f"{r['name']}: {r['detail']}") for r in rows])


def strategies(backend: str) -> bool:
    """Part 2 on one rank with `backend`; prints one line per check; True if all are ok."""
    with labkit.Cluster(1, backend=backend, spares=0) as c:
        t0 = time.monotonic()
        rows = c.run(strategy_checks, timeout=420)[0]
        print(f"part 2: {len(rows)} checks on one rank, backend {c.backend}, in {time.monotonic() - t0:.1f} s")
    return print_rows(rows)


NO_CUDA = 2          # the exit status when there is no CUDA device and nothing was checked


def cli(argv: list) -> int:
    if argv[:1] == ["--given"]:
        given_child(int(argv[1]), argv[2])
        return 0
    if argv[:1] == ["--cpu"]:
        return 0 if strategies("gloo") else 1
    if not torch.cuda.is_available():
        print(f"no CUDA device: nothing checked (torch {torch.__version__}, CUDA build: "
              f"{torch.version.cuda is not None}). Run it on a machine with a GPU, or --cpu for the dry run "
              f"of the strategy checks on gloo. Exit status {NO_CUDA}.")
        return NO_CUDA
    main()
    given_gpus()
    return 0 if strategies("nccl") else 1


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
