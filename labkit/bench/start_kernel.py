"""The kernel figure of `python -m labkit.bench start` (issue 36): from Jupyter starting a
notebook's kernel to the result of its first cell (`import torch` and an op), a warm kernel
(forked by the learner's kernels' server, labkit/runtime/local/kernels.py) against a fresh one
(`python -m ipykernel_launcher`), in turn, --repeat of each, in the same run; the server is
started before the clock (it waits for the learner's first kernel once). Goal: warm <= 0.5x.
tests/runtime/test_runtime_kernels.py guards the same ratio.
"""
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid

CELL = "import torch; print(torch.ones(4).sum().item())"


def kernel_specs(root: str, flags: tuple = ()):
    """A KernelSpecManager over `root` with `warm` (the launcher) and `cold` (ipykernel), their
    interpreter started with `flags`."""
    from jupyter_client.kernelspec import KernelSpecManager
    for name, module in (("warm", "labkit.runtime.local.kernels"), ("cold", "ipykernel_launcher")):
        folder = os.path.join(root, "kernels", name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "kernel.json"), "w") as f:
            json.dump({"argv": [sys.executable, *flags, "-m", module, "-f", "{connection_file}"],
                       "display_name": name, "language": "python", "interrupt_mode": "signal"}, f)
    return KernelSpecManager(kernel_dirs=[os.path.join(root, "kernels")])


def own_env(**more) -> dict:
    """An environment whose kernels' server is this run's alone (LABKIT_ZYGOTE_IDLE is part of
    its key), without preloads (they would hold up one start, once, at a moment of their own)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, LABKIT_ZYGOTE_IDLE=f"300.{uuid.uuid4().int % 10**9}", LABKIT_PRELOAD="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.pop("JPY_PARENT_PID", None)
    env.update(more)
    return env


class Kernel:
    """A kernel started as Jupyter starts one, and its client (tests/runtime/test_runtime_kernels.py
    uses it too); `launcher`: the process Jupyter started (the launcher, or ipykernel itself)."""

    def __init__(self, specs, name: str, env: dict, cwd):
        from jupyter_client import KernelManager
        self.km = KernelManager(kernel_name=name, kernel_spec_manager=specs)
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.launcher = self.km.provisioner.process

    def run(self, code: str, timeout: float = 60) -> tuple:
        """(status, stdout, reply content) of one cell."""
        out = []
        reply = self.kc.execute_interactive(
            code, timeout=timeout, output_hook=lambda m: m["msg_type"] == "stream" and out.append(m["content"]["text"]))
        return reply["content"]["status"], "".join(out), reply["content"]

    def close(self) -> None:
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)


def first_result(specs, name: str, env: dict, cwd: str, code: str = CELL) -> tuple:
    """(seconds from the kernel's start to `code`'s output, that output, the kernel's parent)."""
    t0 = time.perf_counter()
    k = None
    try:
        k = Kernel(specs, name, env, cwd)
        _, out, _ = k.run(code + "\nimport os; print('PPID', os.getppid())", timeout=120)
        took = time.perf_counter() - t0
    finally:
        if k is not None:
            k.close()
    lines = out.splitlines()
    ppid = int(next(ln.split()[1] for ln in lines if ln.startswith("PPID ")))
    return took, "\n".join(ln for ln in lines if not ln.startswith("PPID ")), ppid


def stop_server(pid: int) -> None:
    """SIGTERM to a kernels' server (it exits once its kernels have gone); nothing else."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"labkit.runtime.local.kernels_main" not in f.read():
                return
        os.kill(pid, signal.SIGTERM)
    except OSError:
        pass


def measure(repeat: int = 3) -> dict:
    """{"warm": [s, ...], "cold": [s, ...]}: fresh and warm in turn, after the server's start."""
    root = tempfile.mkdtemp(prefix="lkt-bench-kernels-")
    env, times, server = own_env(), {"cold": [], "warm": []}, None
    try:
        specs = kernel_specs(root)
        _, said, server = first_result(specs, "warm", env, root)      # the server starts (untimed)
        for _ in range(repeat):
            for name in ("cold", "warm"):
                took, said, _ = first_result(specs, name, env, root)
                if said.strip() != "4.0":
                    raise AssertionError(f"the {name} kernel printed {said!r}, not 4.0")
                times[name].append(took)
    finally:
        if server:
            stop_server(server)
        shutil.rmtree(root, ignore_errors=True)
    return times


def figure(repeat: int = 3) -> tuple:
    """(warm median / fresh median, what to print beside it)."""
    times = measure(repeat)
    warm, cold = statistics.median(times["warm"]), statistics.median(times["cold"])
    return warm / cold, f"warm kernel {warm:.2f} s vs fresh {cold:.2f} s to the first result"
