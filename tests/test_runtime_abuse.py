"""The runtime under abuse: threads, forks, signals, floods, a killed driver, idle connections.

Each test here reproduces one fault that a reliability test of the Cluster found and checks
the behaviour that replaced it."""
import math
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import labkit
from labkit.runtime import errors, procs

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def c():
    with labkit.Cluster(2, backend="gloo", spares=2, timeout=30) as cl:
        yield cl


def _works(c) -> float:
    """Seconds for a run with a collective to succeed."""
    def fn():
        import torch
        import torch.distributed as dist
        t = torch.ones(1)
        dist.all_reduce(t)
        return t.item()
    t0 = time.monotonic()
    assert c.run(fn, timeout=30) == [2.0, 2.0]
    return time.monotonic() - t0


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pids, limit: float) -> list:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


# -- fault 1: emit from threads; a garbled connection ----------------------------------------
def test_emit_from_several_threads_at_once(c):
    def fn():
        import threading
        pad = "x" * 100_000                  # big messages: several writes each
        def send(k):
            for i in range(20):
                labkit.emit(k=k, i=i, pad=pad)
        threads = [threading.Thread(target=send, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return labkit.rank()

    assert c.run(fn, timeout=20) == [0, 1]
    assert len(c.events) == 2 * 3 * 20
    assert c.run(lambda: labkit.rank() + 10, timeout=20) == [10, 11]


def test_garbage_on_the_control_connection_is_a_rank_error(c):
    def fn():
        import os
        from labkit.runtime import context
        if labkit.rank() == 1:
            os.write(context.control_fd(), b"\x00\x00\x00\x08notapickle")
        return labkit.rank()

    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        c.run(fn, timeout=20)
    assert time.monotonic() - t0 < 10
    assert info.value.ranks == [1] and info.value.restarted
    assert "rank 1 sent the notebook a message it cannot decode" in str(info.value)
    assert _works(c) < 10


def test_a_half_message_never_blocks_past_the_timeout(c):
    def fn():
        import os
        import time
        from labkit.runtime import context
        if labkit.rank() == 0:
            os.write(context.control_fd(), b"\x00\x10\x00\x00half")   # announces 1 MB
        time.sleep(0.2)
        return 1

    t0 = time.monotonic()
    with pytest.raises(labkit.RankTimeout):
        c.run(fn, timeout=1.5)
    assert time.monotonic() - t0 < 8
    assert _works(c) < 10


# -- fault 2: destroy_process_group inside a rank --------------------------------------------
def test_destroy_process_group_in_a_rank_then_the_next_run_works(c):
    c.push(kept="still here")

    def fn():
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()          # the last line of every torchrun script
        return dist.is_initialized()

    assert c.run(fn) == [False, False]
    assert _works(c) < 10
    assert c.pull("kept") == ["still here"] * 2, "the ranks joined a new group, state kept"


# -- fault 4: forks --------------------------------------------------------------------------
def test_forked_children_neither_answer_for_the_rank_nor_survive(c, tmp_path):
    def fn(d):
        import multiprocessing as mp
        import os
        import subprocess
        import time
        if labkit.rank() == 0:
            if os.fork() == 0:               # the child returns at once with a wrong answer
                open(f"{d}/fork", "w").write(str(os.getpid()))
                return "from a forked child"
            p = mp.get_context("fork").Process(target=time.sleep, args=(60,))
            p.start()
            open(f"{d}/mp", "w").write(str(p.pid))
            s = subprocess.Popen(["sleep", "60"])
            open(f"{d}/sub", "w").write(str(s.pid))
            time.sleep(0.5)
        return "from the rank"

    assert c.run(fn, str(tmp_path)) == ["from the rank"] * 2
    pids = [int((tmp_path / n).read_text()) for n in ("fork", "mp", "sub")]
    assert _gone(pids[0]), "the forked child exited where it would have answered"
    c.restart()
    assert _wait_gone(pids, 3.0) == [], "every process a rank started goes with it"
    assert _works(c) < 10


# -- fault 5: the control port ---------------------------------------------------------------
def test_control_port_sheds_idle_connections():
    from multiprocessing.connection import Client
    hellos = []
    srv = procs.ControlServer(lambda *a: hellos.append(a), handshake_timeout=1.0, max_pending=4)
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
        conn.send(("hello", 1, 2, "x"))
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
conn.send(("hello", 7, 8, "x"))
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


# -- fault 6: double Ctrl-C ------------------------------------------------------------------
@pytest.mark.parametrize("gap_ms", [5, 20])
def test_a_quick_double_ctrl_c_leaves_the_cluster_consistent(c, gap_ms):
    assert c.wait_for_spares(60)
    pid = os.getpid()

    def press():
        time.sleep(1.0)
        os.kill(pid, signal.SIGINT)
        time.sleep(gap_ms / 1000)
        os.kill(pid, signal.SIGINT)

    seen = []
    threading.Thread(target=press, daemon=True).start()
    try:
        c.run(lambda: __import__("time").sleep(20), timeout=25)
    except KeyboardInterrupt as exc:
        seen.append(str(exc))
    try:
        time.sleep(0.5)                       # a second interrupt that came after the first one
    except KeyboardInterrupt:
        seen.append("late")
    assert seen and seen[0].startswith("interrupted: the 2 ranks were stopped"), seen
    t0 = time.monotonic()
    assert c.run(lambda: labkit.rank() + 10, timeout=20) == [10, 11]
    assert time.monotonic() - t0 < 10


# -- fault 7: output cap ---------------------------------------------------------------------
def test_output_is_capped_per_rank_per_run(c, capsys):
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


# -- fault 10: one rank raises while the others compute --------------------------------------
def test_a_rank_raises_while_the_others_compute_locally(c):
    c.push(kept="here")

    def fn():
        import time
        if labkit.rank() == 1:
            raise ValueError("bad input on rank 1")
        t0 = time.time()
        while time.time() - t0 < 1.5:        # local work, no collective
            pass
        return "done"

    with pytest.raises(labkit.RankError) as info:
        c.run(fn)
    err = info.value
    assert err.ranks == [1] and not err.stuck and not err.restarted
    assert c.pull("kept") == ["here"] * 2


# -- fault 11 and 12 (folders): a killed driver ----------------------------------------------
DRIVER = r"""
import os, sys, time, labkit
c = labkit.Cluster(2, backend="gloo", spares=0)
print("PIDS", *[w.pid for w in c.ranks], flush=True)
print("DIR", c._pool.stack_dir, flush=True)
def fn(d):
    import ctypes, os, signal, time
    if labkit.rank() == 0:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        open(os.path.join(d, "stopping"), "w").close()
        os.kill(os.getpid(), signal.SIGSTOP)            # a frozen rank
    else:
        open(os.path.join(d, "in_c"), "w").close()
        ctypes.PyDLL(None).sleep(120)                  # C code holding the GIL
c.run(fn, sys.argv[1], timeout=100)
"""


def test_a_killed_driver_leaves_no_worker_and_no_folder(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], stdout=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        pids = [int(x) for x in p.stdout.readline().split()[1:]]
        stack_dir = p.stdout.readline().split()[1]
        t0 = time.monotonic()
        while not ((tmp_path / "stopping").exists() and (tmp_path / "in_c").exists()):
            assert time.monotonic() - t0 < 60 and p.poll() is None
            time.sleep(0.05)
        time.sleep(0.3)
        children = [int(x) for x in subprocess.run(["pgrep", "-g", str(pids[0])],
                                                   capture_output=True, text=True).stdout.split()]
        assert len(children) == 2, "rank 0 and its forked child"
    finally:
        p.kill()
        p.wait()
    assert _wait_gone(set(pids + children), 5.0) == []
    assert os.path.isdir(stack_dir)
    assert stack_dir in procs.remove_stale_dirs(os.path.dirname(stack_dir))
    assert not os.path.exists(stack_dir)


# -- fault 12 --------------------------------------------------------------------------------
def test_a_stopped_rank_is_reported_as_stopped(c):
    def fn():
        import os
        import signal
        if labkit.rank() == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        return 1

    with pytest.raises(labkit.RankTimeout) as info:
        c.run(fn, timeout=1.0)
    assert info.value.stuck[1].startswith("stopped (SIGSTOP"), info.value.stuck
    assert _works(c) < 10


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "5"])
def test_timeouts_that_make_no_sense_are_refused_first(c, bad):
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        c.run(lambda: 1, timeout=bad)
    assert c.run(lambda: labkit.rank(), timeout=20) == [0, 1]


def test_timeouts_of_a_new_cluster_are_checked_before_it_starts():
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="pg_timeout"):
        labkit.Cluster(2, timeout=5, pg_timeout=-3)
    with pytest.raises(ValueError, match="timeout"):
        labkit.Cluster(2, timeout=math.nan)
    assert time.monotonic() - t0 < 5


def test_a_result_the_notebook_cannot_read_names_the_rank(c):
    def fn():
        def explode():
            if not labkit.runtime.context.in_cluster():
                raise RuntimeError("this object only unpickles on a rank")

        class Odd:
            def __reduce__(self):
                return (explode, ())
        return Odd() if labkit.rank() == 1 else 0

    with pytest.raises(labkit.RankError) as info:
        c.run(fn)
    assert info.value.ranks == [1] and not info.value.restarted
    assert "rank 1 finished, but the notebook cannot read its result" in str(info.value)
    assert "only unpickles on a rank" in str(info.value)


def test_a_recursion_error_is_collapsed(c):
    def fn():
        def down(n):
            return down(n + 1)
        return down(0)

    with pytest.raises(labkit.RankError) as info:
        c.run(fn)
    text = str(info.value)
    assert "RecursionError" in text and "more times]" in text and len(text) < 3000, len(text)


def test_close_from_another_thread_says_closed():
    cl = labkit.Cluster(1, backend="gloo", spares=0)
    threading.Timer(1.0, cl.close).start()
    with pytest.raises(RuntimeError) as info:
        cl.run(lambda: __import__("time").sleep(30), timeout=60)
    assert "the cluster was closed" in str(info.value)
    assert "out of memory" not in str(info.value)


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
        assert _works(cl) < 15


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
    text = errors.describe_stack(frames)                 # a dump: innermost first
    assert text.splitlines()[0] == "in inner() (most recent call last):"
    body = [ln for ln in text.splitlines()[1:] if ", in " in ln]
    assert [ln.rsplit(" ", 1)[1] for ln in body] == ["outer", "middle", "inner"]
    fails = {r: errors.Failure(r, "ValueError", f"rank {r} is wrong", "  tb line") for r in range(4)}
    msg = errors.failure_message("fn()", 4, fails, {}, False)
    assert msg.count("tb line") == 1 and msg.count("Traceback") == 1
    assert all(f"rank {r}: ValueError: rank {r} is wrong" in msg for r in range(4))
