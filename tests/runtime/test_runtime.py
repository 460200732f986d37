"""The Cluster's normal path: results, arguments, closures, streaming output, events,
%%ranks namespaces, push/pull, concurrent clusters, bad input."""
import os
import sys
import threading
import time

import pytest

import labkit
from labkit.runtime import wire
from labkit.runtime.local import zygote


def test_results_by_rank_with_args_kwargs_and_closure(cluster):
    offset = 100                                   # a closure variable, sent by value

    def fn(x, *, scale):
        import torch
        import torch.distributed as dist
        t = torch.tensor([float(labkit.rank())])
        dist.all_reduce(t)
        return (labkit.rank(), labkit.world_size(), t.item() * scale + x + offset)

    n = cluster.world_size
    total = n * (n - 1) / 2
    assert cluster.run(fn, 1, scale=2) == [(r, n, total * 2 + 1 + offset) for r in range(n)]


def test_repr_and_properties(cluster2):
    assert cluster2.world_size == 2 and cluster2.backend == "gloo" and cluster2.device_type == "cpu"
    assert "world_size=2" in repr(cluster2) and "'gloo'" in repr(cluster2)
    assert cluster2.run(lambda: str(labkit.device())) == ["cpu", "cpu"]


def test_threads_are_a_fair_share(cluster4):
    import os
    cores = len(os.sched_getaffinity(0))
    threads = cluster4.run(lambda: __import__("torch").get_num_threads())
    assert threads == [max(1, cores // 4)] * 4


def test_tensors_come_back(cluster2):
    import torch
    out = cluster2.run(lambda: torch.arange(3) * labkit.rank())
    assert torch.equal(out[1], torch.tensor([0, 1, 2]))


class _Stream:
    """A stdout that records when each line arrives."""

    def __init__(self):
        self.lines = []

    def write(self, s):
        now = time.monotonic()
        for line in s.splitlines():
            self.lines.append((now, line))

    def flush(self):
        pass


@pytest.mark.serial      # lines must arrive 0.7 s before the end: alone in CI
def test_output_streams_while_running_in_order_per_rank(cluster, monkeypatch):
    stream = _Stream()
    monkeypatch.setattr(sys, "stdout", stream)

    def chatty():
        import time
        for i in range(20):
            print("line", i)
        time.sleep(1.0)
        print("last")

    t0 = time.monotonic()
    cluster.run(chatty)
    done = time.monotonic()
    for r in range(cluster.world_size):
        mine = [(t, ln) for t, ln in stream.lines if ln.startswith(f"[rank {r}] ")]
        assert [ln for _, ln in mine] == [f"[rank {r}] line {i}" for i in range(20)] + [f"[rank {r}] last"]
        assert mine[0][0] - t0 < done - t0 - 0.7, "the first lines must arrive before the run ends"


def test_stderr_and_warnings_reach_the_cell(cluster2, capsys):
    def warn():
        import sys
        import warnings
        print("to stderr", file=sys.stderr)
        warnings.warn(f"careful on rank {labkit.rank()}")

    cluster2.run(warn)
    out = capsys.readouterr().out
    assert "[rank 1] to stderr" in out and "careful on rank 1" in out


@pytest.mark.serial      # events must arrive 0.4 s before the end: alone in CI
def test_events_reach_the_notebook_during_the_run(cluster2):
    seen = []
    stop = cluster2.on_event(lambda e: seen.append((e.rank, e.data["step"], time.monotonic())))

    def train():
        import time
        for step in range(3):
            labkit.emit(step=step, loss=1.0 / (step + 1))
            time.sleep(0.3)

    try:
        cluster2.run(train)
        done = time.monotonic()
    finally:
        stop()
    assert sorted((r, s) for r, s, _ in seen) == [(r, s) for r in range(2) for s in range(3)]
    assert min(t for _, s, t in seen if s == 0) < done - 0.4
    assert [e.data["step"] for e in cluster2.events if e.rank == 0] == [0, 1, 2]


def test_push_pull(cluster):
    import torch
    cluster.push(lr=0.1, w=torch.ones(2))
    assert cluster.pull("lr") == [0.1] * cluster.world_size
    with pytest.raises(labkit.RankError, match="has no variable 'nope'"):
        cluster.pull("nope")


def test_ranks_magic_keeps_state_per_rank(cluster2, capsys):
    from IPython.core.interactiveshell import InteractiveShell
    from labkit.runtime import kernel
    shell = InteractiveShell.instance()
    old = kernel._current
    try:
        shell.run_cell("%load_ext labkit", store_history=True)
        shell.user_ns["c2"] = cluster2
        r = shell.run_cell("%%ranks -c c2\nx = torch.ones(2) * rank\ndist.all_reduce(x)\nmine = rank * 10",
                           store_history=True)
        assert r.success, r.error_in_exec
        r = shell.run_cell("%%ranks -c c2\ny = mine + x.sum().item()\ny", store_history=True)
        assert r.success, r.error_in_exec
        assert cluster2.pull("y") == [2.0, 12.0]
        r = shell.run_cell("%%ranks -c c2\nraise KeyError('in a cell')", store_history=True)
        assert isinstance(r.error_in_exec, labkit.RankError)
        shown = capsys.readouterr().out
        assert "KeyError: 'in a cell'" in shown and "collect.py" not in shown, "no runtime frames shown"
        assert "Cell In[" in str(r.error_in_exec) and "raise KeyError" in str(r.error_in_exec)
        assert cluster2.pull("mine") == [0, 10], "a plain error keeps every rank's variables"
    finally:
        kernel._current = old


def test_world_size_one():
    with labkit.Cluster(1, spares=0) as c:
        assert c.run(lambda: (labkit.rank(), labkit.world_size())) == [(0, 1)]


def _seed():
    import torch
    return torch.initial_seed(), torch.rand(1).item()


def test_every_rank_draws_its_own_random_numbers_as_a_fresh_process_does():
    """torchrun's ranks are fresh processes, each with a seed of its own: so are a Cluster's,
    forked by a zygote or spawned. (Forks shared the zygote's: every rank of every cluster drew
    the same `torch.rand`.) Seeding is the learner's to do, as with torchrun. Two clusters of
    their own (a shared fixture's ranks may have been seeded by an earlier test)."""
    with labkit.Cluster(2, spares=0) as one, labkit.Cluster(2, spares=0) as other:
        seeds = one.run(_seed) + other.run(_seed)
    assert len({s for s, _ in seeds}) == 4 and len({r for _, r in seeds}) == 4, seeds


def _frozen():
    import gc
    return gc.get_freeze_count()


@pytest.mark.skipif(not zygote.ENABLED, reason="spawned ranks (LABKIT_PORTABLE=1, macOS) import torch themselves")
@pytest.mark.parametrize("which", ["learner", "cluster"])
def test_ranks_come_from_a_zygote_that_froze_its_heap(which, monkeypatch):
    """Both zygotes (the learner's and a cluster's own) call gc.freeze() after their imports, so
    a rank's collections walk only what the rank made, not torch's import-time objects (and
    leave their pages shared with the zygote)."""
    if which == "cluster":
        monkeypatch.setenv("LABKIT_ZYGOTE", "cluster")
    with labkit.Cluster(2, spares=0) as c:
        counts = c.run(_frozen)
    assert min(counts) > 50_000, counts


def test_two_clusters_at_once_do_not_collide(cluster2):
    with labkit.Cluster(2, spares=0) as other:
        assert other.source.pool.server.address != cluster2.source.pool.server.address
        assert other.source.store_path != cluster2.source.store_path
        for c in (other, cluster2):
            folder = os.path.dirname(c.source.store_path)   # the rendezvous: a private file
            assert c.source.pool.server.address == os.path.join(folder, "control")  # a Unix socket
            assert os.stat(folder).st_mode & 0o777 == 0o700 and os.stat(folder).st_uid == os.getuid()
        results = {}

        def go(name, c):
            def fn():
                import torch
                import torch.distributed as dist
                t = torch.ones(1)
                for _ in range(50):
                    dist.all_reduce(t)
                return t.item()
            results[name] = c.run(fn)

        threads = [threading.Thread(target=go, args=(n, c)) for n, c in (("a", other), ("b", cluster2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {"a": [2.0 ** 50] * 2, "b": [2.0 ** 50] * 2}


def test_control_channel_rejects_a_wrong_key(cluster2):
    from multiprocessing.connection import Client
    from multiprocessing import AuthenticationError
    with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
        Client(cluster2.source.pool.server.address, authkey=b"not the key").send(("hello", 1, 1, ""))
    assert cluster2.run(lambda: 1) == [1, 1]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4", True])
def test_bad_world_size(bad):
    with pytest.raises(ValueError, match="world_size"):
        labkit.Cluster(bad)


def test_bad_backend():
    import torch
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="one GPU per rank"):
            labkit.Cluster(64, backend="nccl")
    with pytest.raises(ValueError, match="'auto', 'gloo' or 'nccl'"):
        labkit.Cluster(2, backend="mpi")


def test_unpicklable_things_are_named(cluster2):
    lock = threading.Lock()

    def uses_lock():
        return lock.locked()

    with pytest.raises(TypeError, match="argument 0 of .*generator"):
        cluster2.run(lambda g: 1, (i for i in range(3)))
    with pytest.raises(TypeError, match="argument key= "):
        cluster2.run(lambda key: 1, key=threading.Lock())
    with pytest.raises(TypeError, match="closure variable 'lock'"):
        cluster2.run(uses_lock)
    with pytest.raises(TypeError, match="needs a function"):
        cluster2.run(42)
    assert cluster2.run(lambda: 2) == [2, 2]


def test_a_second_cluster_mentions_the_first_and_close_all(capsys, monkeypatch):
    import weakref
    from labkit.runtime import kernel
    monkeypatch.setattr(kernel, "_open", weakref.WeakSet())   # leave the shared ones open
    first = labkit.Cluster(1, spares=0)
    second = labkit.Cluster(1, spares=0)
    assert "other cluster(s) still open" in capsys.readouterr().err
    assert labkit.close_all() == 2
    assert first.closed and second.closed


def test_opening_and_closing_clusters_leaves_the_others_working(cluster2):
    """Closing a cluster frees exactly its own sockets (it once closed another cluster's)."""
    import os
    fds = len(os.listdir("/proc/self/fd"))
    for n in (1, 2, 1):
        with labkit.Cluster(n, spares=0) as c:
            assert c.run(lambda: 1) == [1] * n
        assert cluster2.run(lambda: 2) == [2, 2]
    assert len(os.listdir("/proc/self/fd")) <= fds + 2, "file descriptors leak per cluster"


def test_run_on_a_closed_cluster():
    c = labkit.Cluster(1, spares=0)
    c.close()
    c.close()                                       # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        c.run(lambda: 1)


def test_fast_submodule_finder_matches_cloudpickle():
    """wire's faster _find_imported_submodules gives cloudpickle's answer."""
    import concurrent.futures  # noqa: F401
    import types
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn.functional  # noqa: F401

    def f():
        return torch.distributed.is_available(), torch.nn.functional.relu, concurrent.futures.Future

    deps = [sys.modules["torch"], sys.modules["concurrent"], types]
    ours = wire._find_imported_submodules(f.__code__, deps)
    slow = []
    for x in deps:
        if isinstance(x, types.ModuleType) and getattr(x, "__package__", None):
            for name in list(sys.modules):
                if name.startswith(x.__name__ + "."):
                    if not set(name[len(x.__name__) + 1:].split(".")) - set(f.__code__.co_names):
                        slow.append(sys.modules[name])
    assert sorted(m.__name__ for m in ours) == sorted(m.__name__ for m in slow)
    assert "torch.distributed" in [m.__name__ for m in ours]
