"""scripts/gpu_check.py without a GPU: it says that nothing was checked (exit status 2), and its
strategy checks (what --cpu runs) make every call into labkit, with the same arguments, on gloo
at world size 1, and each holds there; the CUDA allocator's rounding as a pure formula."""
import importlib.util
import os
import sys

import cloudpickle
import pytest
import torch

from labkit.memory.formulas import cuda_block_bytes

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu_check.py")
CHECKS = ("DDP naive", "DDP flat", "DDP bucketed", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP2", "TP block",
          "pipeline 1F1B", "ring attention", "MoE layer", "bf16 mixed precision", "fp16 with loss scaling",
          "memory, fp32 Adam", "memory, bf16 mixed", "memory, ZeRO-2")


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    cloudpickle.register_pickle_by_value(mod)        # the ranks cannot import a script by name
    yield mod
    cloudpickle.unregister_pickle_by_value(mod)
    del sys.modules[spec.name]


def test_cuda_blocks_are_storages_rounded_up_to_512_bytes():
    assert cuda_block_bytes([]) == 0 and cuda_block_bytes([0]) == 0
    assert cuda_block_bytes([1, 4, 512]) == 3 * 512
    assert cuda_block_bytes([513, 1 << 20]) == 1024 + (1 << 20)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: run the script itself")
def test_without_a_gpu_it_says_nothing_was_checked(gpu_check, capsys):
    assert gpu_check.cli([]) == gpu_check.NO_CUDA == 2
    assert "no CUDA device: nothing checked" in capsys.readouterr().out


def test_the_cpu_dry_run_makes_every_check_and_each_holds(gpu_check, cluster1, capsys):
    rows = cluster1.run(gpu_check.strategy_checks, timeout=240)[0]
    assert gpu_check.print_rows(rows), capsys.readouterr().out
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(CHECKS) and all(ln.startswith("ok: ") for ln in lines), lines
    for line, name in zip(lines, CHECKS):
        assert line.startswith(f"ok: {name}"), (line, name)
    assert not any("raised" in r["detail"] for r in rows)
