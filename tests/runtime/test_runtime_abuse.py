"""The runtime under abuse: threads, forks, signals, a killed driver, frozen ranks.

Each test here reproduces one fault that a reliability test of the Cluster found and checks
the behaviour that replaced it."""
import math
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

import labkit
from labkit.runtime import stacks
from support.runtime_helpers import gone, works

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def c():
    with labkit.Cluster(2, backend="gloo", spares=2, timeout=30) as cl:
        yield cl




def _wait_gone(pids, limit: float) -> list:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit and not all(gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not gone(p)]


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


def test_garbage_or_half_a_message_on_the_control_connection(c):
    def fn():
        import os
        import time
        from labkit.runtime import context
        if labkit.rank() == 0:
            os.write(context.control_fd(), b"\x00\x10\x00\x00half")   # announces 1 MB
        else:
            os.write(context.control_fd(), b"\x00\x00\x00\x08notapickle")
        time.sleep(0.2)
        return labkit.rank()

    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        c.run(fn, timeout=1.5)
    assert time.monotonic() - t0 < 8, "never blocked past the timeout"
    err = info.value
    assert err.ranks == [1] and sorted(err.stuck) == [0] and err.restarted
    assert "rank 1 sent the notebook a message it cannot decode" in str(err)
    assert works(c) < 30


# -- fault 2: destroy_process_group inside a rank --------------------------------------------
def test_destroy_process_group_in_a_rank_then_the_next_run_works(c):
    c.push(kept="still here")

    def fn():
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()          # the last line of every torchrun script
        return dist.is_initialized()

    assert c.run(fn) == [False, False]
    assert works(c) < 30
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
    assert gone(pids[0]), "the forked child exited where it would have answered"
    c.restart()
    assert _wait_gone(pids, 3.0) == [], "every process a rank started goes with it"
    assert works(c) < 30


# -- fault 6: double Ctrl-C ------------------------------------------------------------------
@pytest.mark.parametrize("gap_ms", [10])
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
print("DIR", c.source.pool.stack_dir, flush=True)
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
    if os.path.isdir(stack_dir):    # the zygote removes it once the notebook is gone; else the next Cluster
        assert stack_dir in stacks.remove_stale_dirs(os.path.dirname(stack_dir))
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
    assert works(c) < 30


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


def test_close_from_another_thread_says_closed(c):   # last here: it closes the module's cluster
    cl = c
    threading.Timer(1.0, cl.close).start()
    with pytest.raises(RuntimeError) as info:
        cl.run(lambda: __import__("time").sleep(30), timeout=60)
    assert "the cluster was closed" in str(info.value)
    assert "out of memory" not in str(info.value)
