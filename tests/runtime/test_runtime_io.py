"""The runtime under abuse, part 2: the control port, output (the cap, live partial lines),
Cluster(env=, pg_timeout=), and the runtime's interfaces (issue 15, issue 8 sections 5-6)."""
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

import labkit
from labkit.runtime import errors, stacks
from labkit.runtime.control import ControlServer
from support.runtime_helpers import works

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


# -- fault 5: the control port ---------------------------------------------------------------
def test_control_port_sheds_idle_connections():
    from multiprocessing.connection import Client
    hellos = []
    srv = ControlServer(lambda *a: hellos.append(a), handshake_timeout=1.0, max_pending=4)
    try:
        idle = [socket.create_connection(srv.address) for _ in range(8)]
        t0 = time.monotonic()
        while srv.pending() and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert srv.pending() == 0, "stalled handshakes are shut after the deadline"
        for s in idle:
            s.settimeout(5)
            data = s.recv(1000)              # the challenge, then the server hangs up
            while data:
                data = s.recv(1000)
            s.close()
        conn = Client(srv.address, authkey=srv.authkey)
        from labkit.runtime.protocol import Hello
        conn.send(Hello(1, 2, "x"))
        t0 = time.monotonic()
        while not hellos and time.monotonic() - t0 < 5:
            time.sleep(0.02)
        assert hellos and hellos[0][0] == 1
        conn.close()
    finally:
        srv.close()


EMFILE_SCRIPT = r"""
import resource, socket, sys, time
from multiprocessing.connection import Client
from labkit.runtime.control import ControlServer
hellos = []
srv = ControlServer(lambda *a: hellos.append(a))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
client = socket.socket()
top = max(int(x) for x in __import__("os").listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1, hard))
fillers = []
while True:                                                   # no descriptor is left
    try:
        fillers.append(__import__("os").open("/dev/null", 0))
    except OSError:
        break
client.connect(srv.address)                                   # accept() now fails: EMFILE
time.sleep(0.5)
for fd in fillers:
    __import__("os").close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
client.close()
print("errors survived", srv.accept_errors, flush=True)
conn = Client(srv.address, authkey=srv.authkey)
conn.send(__import__("labkit.runtime.protocol", fromlist=["Hello"]).Hello(7, 8, "x"))
t0 = time.monotonic()
while not hellos and time.monotonic() - t0 < 5:
    time.sleep(0.02)
print("hello", hellos[0][0] if hellos else None, flush=True)
"""


def test_accept_loop_survives_running_out_of_descriptors():
    p = subprocess.run([sys.executable, "-c", EMFILE_SCRIPT], capture_output=True, text=True,
                       timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "hello 7" in p.stdout, p.stdout + p.stderr[-2000:]
    n = int(p.stdout.split("errors survived")[1].split()[0])
    assert n >= 1, "the test did make accept() fail"


# -- fault 7: output cap ---------------------------------------------------------------------
def test_output_is_capped_per_rank_per_run(cluster2, capsys):
    c = cluster2
    assert c.output_lines == 10_000 and c.output_bytes == 1_000_000   # the documented defaults
    c.output_lines = 100
    try:
        def flood():
            for i in range(30_000):          # 300 KB: more than a pipe holds, so it must drain
                print("line", i)
            return labkit.rank()
        assert c.run(flood, timeout=60) == [0, 1]
        out = capsys.readouterr().out
        for r in range(2):
            assert out.count(f"[rank {r}] line") == 100
            assert f"[rank {r}] ... 29,900 lines not shown" in out
        c.output_lines, c.output_bytes = None, 5_000
        c.run(lambda: print(("y" * 999 + "\n") * 20, end=""), timeout=30)
        out = capsys.readouterr().out
        assert out.count("[rank 0] yyy") == 5 and "[rank 0] ... 15 lines not shown" in out
        c.run(lambda: print("short"), timeout=30)
        assert "[rank 1] short" in capsys.readouterr().out, "the budget is per run"
    finally:
        c.output_lines, c.output_bytes = 10_000, 1_000_000


# -- live output -----------------------------------------------------------------------------
class _Screen:
    live = True

    def __init__(self):
        self.calls = []

    def line(self, rank, text):
        self.calls.append(("line", rank, text))

    def show(self, rank, text, handle=None):
        handle = handle or object()
        self.calls.append(("show", rank, text, handle))
        return handle


def test_partial_lines_and_carriage_returns(monkeypatch):
    from labkit.runtime import output
    monkeypatch.setattr(output, "LIVE_EVERY_S", 0.0)
    s = _Screen()
    a, b = output.RankOutput(0, s), output.RankOutput(1, s)
    a.feed(b"\r 10%")
    b.feed(b"\r  5%")
    a.feed(b"\r 20%")
    assert [c[1:3] for c in s.calls] == [(0, " 10%"), (1, "  5%"), (0, " 20%")]
    assert s.calls[0][3] is s.calls[2][3], "a rank's bar redraws its own display"
    assert s.calls[0][3] is not s.calls[1][3], "ranks do not share a display"
    a.feed(b"\r100%\nnext line\n")
    assert s.calls[-2][1:3] == (0, "100%") and s.calls[-1] == ("line", 0, "next line")
    assert output.overwrite("abcdef\rxy") == "xycdef"
    n = len(s.calls)
    b.finish()                               # rank 1's unfinished line already shows as it is
    assert len(s.calls) == n
    b.feed(b"x" * 10 + b"\r")
    b.finish()
    assert s.calls[-1][1:3] == (1, "x" * 10)


def test_a_print_split_in_two_writes_stays_plain_text():
    from labkit.runtime import output
    s = _Screen()
    o = output.RankOutput(0, s)
    o.feed(b"working on 5")                  # print() writes the text, then the newline
    o.feed(b"\n")
    assert s.calls == [("line", 0, "working on 5")]


LIVE = r"""
import time, labkit
c = labkit.Cluster(2, backend="gloo", spares=0)
def bar():
    import time
    for i in range(0, 101, 20):
        print(f"\r{i:3d}%|" + "#" * (i // 10), end="", flush=True)
        time.sleep(0.4)
    print()
    return 1
print("STARTED", time.time(), flush=True)
c.run(bar)
print("ENDED", time.time(), flush=True)
c.close()
"""


def test_progress_bars_update_live_in_a_notebook():
    jupyter_client = pytest.importorskip("jupyter_client")
    from jupyter_client.kernelspec import KernelSpecManager
    name = "labkit" if "labkit" in KernelSpecManager().find_kernel_specs() else "python3"
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name=name, cwd=str(ROOT))
    try:
        msg_id = kc.execute(LIVE)
        got = []
        while True:
            msg = kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            t = msg["msg_type"]
            if t in ("display_data", "update_display_data"):
                got.append((time.time(), msg["content"]["data"]["text/plain"]))
            elif t == "stream":
                got.append((time.time(), msg["content"]["text"]))
            elif t == "error":
                raise AssertionError(msg["content"]["evalue"])
            elif t == "status" and msg["content"]["execution_state"] == "idle":
                break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(x for _, x in got)
    ended = next(t for t, x in got if "ENDED" in x)
    for r in range(2):
        live = [t for t, x in got if x.startswith(f"[rank {r}]  40%")]
        assert live and live[0] < ended - 0.5, f"rank {r}'s bar showed before the run ended"
        assert any(x == f"[rank {r}] 100%|##########" for _, x in got)
        assert f"[rank {1 - r}]" not in "".join(x for _, x in got if x.startswith(f"[rank {r}]"))
    assert "\r" not in text


# -- env= and pg_timeout= --------------------------------------------------------------------
def test_env_reaches_the_ranks_before_the_process_group_and_pg_timeout_applies():
    with labkit.Cluster(2, backend="gloo", spares=0, timeout=30, pg_timeout=3,
                        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "LABKIT_TEST": "yes"}) as cl:
        assert cl.run(lambda: __import__("os").environ["LABKIT_TEST"]) == ["yes", "yes"]

        def mismatch():
            import torch
            import torch.distributed as dist
            dist.all_reduce(torch.ones(2 + labkit.rank()))   # shapes differ between ranks

        with pytest.raises(labkit.RankError) as info:
            cl.run(mismatch)
        assert "mismatch" in str(info.value).lower(), str(info.value)[:2000]

        def lonely():
            import torch
            import torch.distributed as dist
            if labkit.rank() == 0:
                dist.all_reduce(torch.ones(1))               # rank 1 never joins it

        t0 = time.monotonic()
        with pytest.raises(labkit.RankError) as info:
            cl.run(lonely)
        assert time.monotonic() - t0 < 20
        text = str(info.value)
        assert info.value.ranks == [0] and "--- rank 0:" in text and "pg_timeout" in text, text
        assert works(cl) < 30


# -- issue 8 section 6: the runtime's private reach ------------------------------------------
def test_the_runtime_reaches_nothing_private():
    src = {p.name: p.read_text() for p in (ROOT / "labkit" / "runtime").glob("*.py")}
    assert "magic" not in src["cluster.py"], "cluster.py <-> magic.py import cycle"
    assert "context._worker" not in (ROOT / "labkit" / "comm" / "traffic.py").read_text()
    import re
    assert not re.search(r"(cluster|host)\._\w", src["collect.py"])


# -- issue 8 section 5: how errors read ------------------------------------------------------
def test_errors_read_like_python_tracebacks():
    f = "/x/learner.py"
    frames = [(f, 9, "inner", "x = y"), (f, 5, "middle", "inner()"), (f, 2, "outer", "middle()")]
    text = stacks.describe_stack(frames)                 # a dump: innermost first
    assert text.splitlines()[0] == "in inner() (most recent call last):"
    body = [ln for ln in text.splitlines()[1:] if ", in " in ln]
    assert [ln.rsplit(" ", 1)[1] for ln in body] == ["outer", "middle", "inner"]
    fails = {r: errors.Failure(r, "ValueError", f"rank {r} is wrong", "  tb line") for r in range(4)}
    msg = errors.failure_message("fn()", 4, fails, {}, False)
    assert msg.count("tb line") == 1 and msg.count("Traceback") == 1
    assert all(f"rank {r}: ValueError: rank {r} is wrong" in msg for r in range(4))


def test_an_interrupt_in_ipython_shows_the_cell_not_the_runtime(tmp_path):
    """Ctrl-C (the lab's stop button) during cluster.run: the learner sees their cell and the
    message, not labkit.runtime's wait loop; the next run works."""
    script = tmp_path / "interrupt.py"
    script.write_text(
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython()\n"
        "ip.run_cell('import labkit, time, os, signal, threading\\ncluster = labkit.Cluster(2)\\n"
        "cluster.run(lambda: 1)')\n"
        "ip.run_cell('threading.Timer(1, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\\n"
        "cluster.run(time.sleep, 30)')\n"
        "ip.run_cell('print(\"next run\", cluster.run(lambda: 2)); cluster.close()')\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert "KeyboardInterrupt: interrupted: the 2 ranks were stopped" in text, text
    assert "labkit/runtime" not in text and "_execute" not in text, text
    assert "next run [2, 2]" in text, text


# -- what the run loop waits on, kept from run to run -------------------------------------------
def _print_later(go: str):
    import threading
    import time as t

    def later():
        while not os.path.exists(go):       # the notebook says when: after this run returned
            t.sleep(0.01)
        print("printed after its run", flush=True)
    threading.Thread(target=later).start()


def test_what_a_rank_prints_between_runs_shows_at_the_next_run_and_the_selector_is_kept(cluster2, capsys,
                                                                                           tmp_path):
    """The group's selector and its poll of the output pipes are kept from run to run (group.py);
    output that arrives between two runs is read by the next one, output printed just before a
    result by that run, and a rank that dies drops the selector: the next ranks get a new one."""
    c, go = cluster2, tmp_path / "go"
    c.run(_print_later, str(go))
    sel = c._group._waits()
    capsys.readouterr()
    go.touch()
    time.sleep(0.5)
    assert "printed after its run" not in capsys.readouterr().out, "nothing reads between runs"
    c.run(lambda: None)
    out = capsys.readouterr().out
    assert out.count("printed after its run") == 2 and "[rank 1] printed after its run" in out, out
    assert c._group._waits() is sel, "the selector is made once per group, not per run"
    for i in range(20):       # printed just before the result: shown by the run that printed it
        c.run(lambda i=i: print(f"run {i}") if labkit.rank() == 1 else None)
        assert f"[rank 1] run {i}" in capsys.readouterr().out, i
    with pytest.raises(labkit.RankError):
        c.run(lambda: os._exit(3) if labkit.rank() == 1 else None, timeout=30)
    assert c.run(lambda: labkit.rank()) == [0, 1]
    assert c._group._waits() is not sel
    assert sel.get_map() is None, "the dead group's selector was closed (no descriptor left open)"


def test_a_closed_cluster_closes_its_selector():
    with labkit.Cluster(1, spares=0) as c:
        c.run(lambda: None)
        sel = c._group._waits()
    assert sel.get_map() is None, "close() closes the selector at once, not at garbage collection"
