"""scripts/gpu_check.py without a GPU: it says that nothing was checked (exit status 2), and its
--cpu dry run makes every strategy check's calls into labkit, with the same arguments, on gloo
at world size 1, and every check holds there; the CUDA allocator's rounding as a pure formula."""
import os
import subprocess
import sys

import pytest
import torch

from labkit.memory.formulas import cuda_block_bytes

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "gpu_check.py")
CHECKS = ("DDP naive", "DDP flat", "DDP bucketed", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP2", "TP block",
          "pipeline 1F1B", "ring attention", "MoE layer", "bf16 mixed precision", "fp16 with loss scaling",
          "memory, fp32 Adam", "memory, bf16 mixed", "memory, ZeRO-2")


def test_cuda_blocks_are_storages_rounded_up_to_512_bytes():
    assert cuda_block_bytes([]) == 0 and cuda_block_bytes([0]) == 0
    assert cuda_block_bytes([1, 4, 512]) == 3 * 512
    assert cuda_block_bytes([513, 1 << 20]) == 1024 + (1 << 20)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: run the script itself")
def test_without_a_gpu_it_says_nothing_was_checked():
    r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no CUDA device: nothing checked" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_the_cpu_dry_run_makes_every_check_and_each_holds():
    r = subprocess.run([sys.executable, SCRIPT, "--cpu"], capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("ok:", "MISS:"))]
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(lines) == len(CHECKS) and all(ln.startswith("ok:") for ln in lines), r.stdout
    for line, name in zip(lines, CHECKS):
        assert line.startswith(f"ok: {name}"), (line, name)
    assert "Traceback" not in r.stderr and "raised" not in r.stdout
