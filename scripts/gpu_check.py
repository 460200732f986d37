"""The GPU path of the runtime, in one short run (for a machine with at least one CUDA GPU).

    .venv/bin/python scripts/gpu_check.py

Checks: backend="auto" picks NCCL; set_device is done for the learner; a CUDA tensor goes
through every collective at world size 1; results come back on the CPU; a rank error and a
timeout (stack dump, kill, spare promotion) work on NCCL ranks. Then GPUs given by a spawner
(CUDA_VISIBLE_DEVICES, in fresh processes): each rank computes on the GPU it was given (matched
by UUID), more ranks than given GPUs fall back to gloo with the line that says why, none given
is gloo, and backend="nccl" with too few refuses naming the variable. Prints one line per check
and exits non-zero on the first failure. CI has no GPU: this is run by hand where one is lent.
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["--given"]:
        given_child(int(sys.argv[2]), sys.argv[3])
    else:
        main()
        given_gpus()
