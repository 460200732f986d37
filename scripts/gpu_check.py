"""The GPU path of the runtime, in one short run (for a machine with at least one CUDA GPU).

    .venv/bin/python scripts/gpu_check.py

Checks: backend="auto" picks NCCL; set_device is done for the learner; a CUDA tensor goes
through every collective at world size 1; results come back on the CPU; a rank error and a
timeout (stack dump, kill, spare promotion) work on NCCL ranks. Prints one line per check and
exits non-zero on the first failure. CI has no GPU: this is run by hand where one is lent.
"""
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


if __name__ == "__main__":
    main()
