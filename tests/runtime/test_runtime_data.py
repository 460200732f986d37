"""The runtime's data path and standby (issue 15): tensors through shared memory, a zygote
that forks ready workers, the learner's edited modules, folder and sys.path on the ranks."""
import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import labkit
from labkit.bench.cluster_data import FAILURES, _crash, fail
from labkit.runtime import shm, wire
from labkit.runtime.local import zygote


# The goal is 1 s from a failure to the next run's result. On a loaded machine (CI, shared
# runners) the bound grows with the load per core; the mechanism is asserted regardless.
_LOAD = os.getloadavg()[0] / (os.cpu_count() or 1)
FAST = float(os.environ.get("LABKIT_TEST_RECOVERY_S", "1.0")) * max(1.0, _LOAD / 2)


def _memfds(pid) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += "memfd:labkit" in os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return n


def _ppid(pid) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


# -- tensors through shared memory --------------------------------------------------------
def _bump(t, views):
    import labkit
    t.add_(labkit.rank() + 1)                     # private to this rank (copy-on-write)
    return t, t[1:], views[0].data_ptr() == views[1].data_ptr() - 4 * views[0].numel()


@pytest.mark.skipif(not shm.ENABLED, reason="no memfd or /proc on this system")
def test_arguments_and_results_travel_by_shared_memory(cluster2):
    x = torch.randn(512, 512)
    x0 = x.clone()
    base = torch.zeros(4, 4096)
    keep = []
    assert len(wire.dumps_call(_bump, (x.clone(), [base[0], base[1]]), {}, keep)) < 10_000
    shm.close(keep)
    out = cluster2.run(_bump, x, [base[0], base[1]])
    for r, (t, view, shared) in enumerate(out):
        assert torch.equal(t, x + (r + 1))         # each rank changed only its own copy
        assert view.data_ptr() == t.data_ptr() + 4 * 512   # a view and its base still share storage
        assert shared                             # views of one storage arrive as views
    assert torch.equal(x, x0)                    # and the notebook's is untouched
    assert _memfds(os.getpid()) <= 2              # the notebook keeps only the results' maps
    del out
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_memfds(w.pid) for w in cluster2.ranks):
        time.sleep(0.05)
    assert not any(_memfds(w.pid) for w in cluster2.ranks)   # ranks released their copies
    cluster2.push(p=torch.nn.Parameter(torch.ones(70_000)), h=torch.ones(50_000, dtype=torch.bfloat16))
    got = cluster2.pull("p")
    assert type(got[1]) is torch.nn.Parameter and got[1].requires_grad and got[1].sum() == 70_000
    assert cluster2.pull("h")[0].dtype == torch.bfloat16


def _hold_and_sleep(t):
    import time
    print("holding", flush=True)
    time.sleep(60)


@pytest.mark.skipif(not shm.ENABLED, reason="no memfd or /proc on this system")
def test_sigkill_of_notebook_or_rank_leaves_nothing(tmp_path):
    before = set(os.listdir("/dev/shm"))
    script = tmp_path / "nb.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch, labkit
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_runtime_data import _hold_and_sleep
        c = labkit.Cluster(2, backend="gloo", spares=0)
        z = c.source.pool.zygote
        print(" ".join(str(w.pid) for w in c.source.pool.workers.values()), z.proc.pid, int(z.shared), flush=True)
        c.run(_hold_and_sleep, torch.ones(8 * 2**20))
    """))
    nb = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    *pids, shared = [int(p) for p in nb.stdout.readline().split()]
    zygote_pid = pids[-1]
    if shared:                  # the learner's zygote outlives the notebook (userzygote.py)
        pids = pids[:-1]
    seen = set()
    while len(seen) < 2:                          # both ranks have mapped the argument
        line = nb.stdout.readline()
        assert line, "the notebook process ended early"
        seen.add(line.split("]")[0])
    assert all(_memfds(p) >= 1 for p in pids[:2])
    nb.kill()
    nb.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{p}") for p in pids):
        time.sleep(0.1)
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)   # every holder is gone
    if shared:
        assert os.path.exists(f"/proc/{zygote_pid}") and _memfds(zygote_pid) == 0
    assert set(os.listdir("/dev/shm")) <= before


def _big_result_then_die(t):
    import os
    import labkit
    import torch
    if labkit.rank() == 1:
        os.kill(os.getpid(), 9)
    return torch.ones(4 * 2**20)


@pytest.mark.skipif(not shm.ENABLED, reason="no memfd or /proc on this system")
def test_rank_killed_holding_shared_memory(cluster2):
    before = set(os.listdir("/dev/shm"))
    with pytest.raises(labkit.RankError, match="SIGKILL"):
        cluster2.run(_big_result_then_die, torch.ones(4 * 2**20))
    assert _memfds(os.getpid()) == 0              # the argument's segment was closed
    assert set(os.listdir("/dev/shm")) <= before
    assert cluster2.run(lambda: 1) == [1, 1]


# -- the zygote: a standby that never runs dry ---------------------------------------------
def _identity():
    import os
    import signal
    import numpy
    import torch
    import labkit
    return (labkit.rank(), os.getpid(), torch.get_num_threads(), os.getpgid(0) == os.getpid(),
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN, float(numpy.random.rand()))


@pytest.mark.serial      # recovery within 1 s: beside a second worker it took 1.07 s
@pytest.mark.skipif(not zygote.ENABLED, reason="no fork on this system")
def test_three_failures_in_a_row_recover_from_the_zygote():
    with labkit.Cluster(2, backend="gloo", spares=0, timeout=60) as c:   # a fresh notebook
        z = c.source.pool.zygote.proc.pid
        ids = c.run(_identity)
        assert all(_ppid(pid) == z for _, pid, *_ in ids)            # forked, not spawned
        assert [i[2:5] for i in ids] == [(c.threads_per_rank, True, True)] * 2
        assert ids[0][5] != ids[1][5]                                # numpy reseeded per fork
        rounds = []
        for _ in range(3):                        # other jobs' load shows as idle time: retry
            times = []
            for how in FAILURES:
                fail(c, how)
                t0 = time.perf_counter()
                assert c.run(_identity)[1][0] == 1
                times.append(time.perf_counter() - t0)
                assert all(_ppid(w.pid) == z for w in c.ranks)       # replacements were forked
            rounds.append(times)
            if max(times) < FAST:
                break
        assert min(max(t) for t in rounds) < FAST, rounds
        assert c.source.pool.forked >= 8


def test_zygote_death_falls_back_to_spawned_workers(monkeypatch):
    monkeypatch.setenv("LABKIT_ZYGOTE_IDLE", f"60.{os.getpid()}")   # a zygote of its own key:
    with labkit.Cluster(2, backend="gloo", spares=0, timeout=60) as c:   # none other's is killed
        if c.source.pool.zygote is None:
            pytest.skip("no zygote on this system")
        os.kill(c.source.pool.zygote.proc.pid, signal.SIGKILL)
        assert c.run(lambda: 2) == [2, 2]         # ranks outlive their zygote
        with pytest.raises(labkit.RankError):
            c.run(_crash)
        assert c.run(lambda: 3) == [3, 3]         # replacements spawned
        assert all(_ppid(w.pid) == os.getpid() for w in c.ranks)


# -- the learner's modules, folder and sys.path ---------------------------------------------
def test_edited_module_reaches_the_ranks(cluster2, tmp_path, monkeypatch):
    mod = tmp_path / "labkit_helper_mod.py"
    mod.write_text("def f():\n    return 'old'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import labkit_helper_mod as m
    assert cluster2.run(m.f) == ["old", "old"]
    time.sleep(0.01)
    mod.write_text("def f():\n    return 'new, longer'\n")
    importlib.reload(m)
    assert cluster2.run(m.f) == ["new, longer"] * 2
    assert cluster2.run(lambda: __import__("labkit_helper_mod").f()) == ["new, longer"] * 2
    sys.modules.pop("labkit_helper_mod")


def test_chdir_and_sys_path_reach_the_ranks(cluster2, tmp_path, monkeypatch):
    (tmp_path / "data.txt").write_text("hello")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "labkit_path_mod.py").write_text("X = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    read = lambda: (open("data.txt").read(), __import__("labkit_path_mod").X)   # noqa: E731
    assert cluster2.run(read) == [("hello", 7)] * 2
    cluster2.restart()
    assert cluster2.run(lambda: os.getcwd()) == [str(tmp_path)] * 2
