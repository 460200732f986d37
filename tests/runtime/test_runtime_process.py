"""The Cluster seen from outside: a real Jupyter kernel that is interrupted and killed, a
plain script without a __main__ guard, and the same function under torchrun."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from support.runtime_helpers import gone

ROOT = pathlib.Path(__file__).resolve().parents[2]



def _wait_gone(pids, limit: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if all(gone(p) for p in pids):
            return time.monotonic() - t0
        time.sleep(0.05)
    alive = [p for p in pids if not gone(p)]
    raise AssertionError(f"processes {alive} still alive after {limit} s")


@pytest.fixture
def kernel():
    jupyter_client = pytest.importorskip("jupyter_client")
    from jupyter_client.kernelspec import KernelSpecManager
    name = "labkit" if "labkit" in KernelSpecManager().find_kernel_specs() else "python3"
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name=name, cwd=str(ROOT))
    yield km, kc
    kc.stop_channels()
    if km.is_alive():
        km.shutdown_kernel(now=True)


def _execute(kc, code: str, timeout: float = 120):
    """Run code in the kernel; return (reply content, stdout text). stop_on_error=False: after a
    cell that fails, ipykernel (7) aborts the requests queued behind it until its shell thread
    posts "stop aborting", so the next cell, sent at once, could come back 'aborted' (CI-like
    run, once); these tests read each error themselves."""
    msg_id = kc.execute(code, stop_on_error=False)
    reply = kc.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=timeout)
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    return reply["content"], "".join(out)


START = ("import labkit\n"
         "c = labkit.Cluster(2, spares=2)\n"
         "assert c.wait_for_spares(60)\n"
         "print('PIDS', ([w.pid for w in c.ranks], [w.pid for w in c.source.pool.spares]))")


def _pids(out: str):
    line = next(ln for ln in out.splitlines() if ln.startswith("PIDS"))
    ranks, spares = eval(line[5:])
    return ranks, spares


@pytest.mark.serial      # every rank stops within 2 s: alone in CI
def test_interrupting_the_kernel_stops_every_rank(kernel):
    km, kc = kernel
    content, out = _execute(kc, START)
    assert content["status"] == "ok", content
    ranks, _ = _pids(out)
    # A function defined in a cell, using a global from another cell, printing as it runs.
    _execute(kc, "FACTOR = 3")
    content, out = _execute(kc, "def f(x):\n    print('working on', x)\n    return x * FACTOR + labkit.rank()\n"
                                "print('RESULT', c.run(f, 5))")
    assert content["status"] == "ok", content
    assert "[rank 0] working on 5" in out and "[rank 1] working on 5" in out and "RESULT [15, 16]" in out
    content, out = _execute(kc, "def g():\n    return 1 / 0\nc.run(g)")
    assert content["status"] == "error" and content["ename"] == "RankError"
    assert "Cell In[" in content["evalue"] and "return 1 / 0" in content["evalue"]
    msg_id = kc.execute("c.run(lambda: __import__('time').sleep(60))", stop_on_error=False)
    time.sleep(1.5)                                  # the ranks are now inside the task
    t0 = time.monotonic()
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    _wait_gone(ranks, 2.0)
    assert time.monotonic() - t0 < 2.0, "every rank stops within 2 s of the interrupt"
    content, out = _execute(kc, "print('NEXT', c.run(lambda: labkit.rank() + 7))")
    assert content["status"] == "ok" and "NEXT [7, 8]" in out


@pytest.mark.serial      # the ranks are gone within 5 s: alone in CI
@pytest.mark.parametrize("how", ["kill", "restart"])
def test_no_worker_outlives_its_kernel(kernel, how):
    km, kc = kernel
    content, out = _execute(kc, START)
    assert content["status"] == "ok", content
    ranks, spares = _pids(out)
    if how == "kill":                                # SIGKILL: no atexit, no finalizers run
        _, pid = _execute(kc, "print(__import__('os').getpid())")
        os.kill(int(pid), signal.SIGKILL)
    else:
        km.restart_kernel(now=True)
    assert _wait_gone(ranks + spares, 5.0) < 5.0


def test_a_plain_script_without_main_guard(tmp_path):
    script = tmp_path / "newcomer.py"
    script.write_text(
        "import labkit, torch, torch.distributed as dist\n"
        "def total():\n"
        "    t = torch.ones(1)\n"
        "    dist.all_reduce(t)\n"
        "    return t.item()\n"
        "cluster = labkit.Cluster(2, spares=0)\n"
        "print('RESULT', cluster.run(total))\n"
        "cluster.close()\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("RESULT [2.0, 2.0]") == 1, p.stdout


def test_two_kernels_worth_of_clusters_at_once(cluster2):
    """Another process with its own cluster while this one runs: no port collides."""
    p = subprocess.Popen([sys.executable, str(ROOT / "examples" / "hello_ranks.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(20):
        assert cluster2.run(lambda: 1) == [1, 1]
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "rank 1 of 2 on cpu: sum of ranks = 1" in out


def test_the_same_function_under_torchrun():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", str(ROOT / "examples" / "hello_ranks.py")],
                       capture_output=True, text=True, timeout=180, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    for r in range(2):
        assert f"rank {r} of 2 on cpu: sum of ranks = 1" in p.stdout
