"""When things go wrong: a rank raises, hangs, dies; the error says where; the next run works."""
import time

import pytest

import labkit
from support.runtime_helpers import works


@pytest.fixture(scope="module")
def fragile():
    """A cluster of its own (with spares), because these tests break it on purpose."""
    with labkit.Cluster(3, backend="gloo", spares=3, timeout=60) as c:
        yield c


@pytest.fixture(autouse=True)
def spares_ready(fragile):
    """Recovery within a second is promised with spares ready (they start after a failure)."""
    assert fragile.wait_for_spares(60)



def test_a_rank_raises(fragile):
    fragile.push(kept="still here")

    def fn():
        if labkit.rank() == 1:
            raise ValueError("bad shape on this rank")
        return labkit.rank()

    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        fragile.run(fn)
    assert time.monotonic() - t0 < 1.0
    err = info.value
    assert err.ranks == [1] and not err.restarted and not err.stuck
    assert isinstance(err.failures[1].exception, ValueError)
    text = str(err)
    assert "1 of 3 ranks failed in fn()" in text
    assert "rank 1: ValueError: bad shape on this rank" in text
    assert "test_runtime_failures.py" in text and 'raise ValueError("bad shape on this rank")' in text
    assert fragile.pull("kept") == ["still here"] * 3, "a plain error keeps the ranks and their state"
    assert works(fragile) < 0.5


def test_identical_failures_are_grouped(fragile):
    def fn():
        return {}["missing"]

    with pytest.raises(labkit.RankError, match=r"--- ranks 0, 1, 2: KeyError: 'missing'"):
        fragile.run(fn)


def test_a_rank_raises_while_the_others_wait_in_a_collective(fragile):
    def fn():
        import torch
        import torch.distributed as dist
        if labkit.rank() == 2:
            raise RuntimeError("rank 2 gives up")
        dist.all_reduce(torch.ones(1))

    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        fragile.run(fn)
    assert time.monotonic() - t0 < 1.5
    err = info.value
    assert err.ranks == [2] and sorted(err.stuck) == [0, 1] and err.restarted
    assert "all_reduce" in err.stuck[0]
    assert works(fragile) < 1.0


def test_a_hang_inside_cpp_says_where_every_rank_is(fragile):
    def exchange():
        import torch
        import torch.distributed as dist
        buf = torch.zeros(4)
        if labkit.rank() == 0:
            dist.recv(buf, src=1)             # rank 1 never sends: blocked in gloo's C++ wait
        return labkit.rank()

    t0 = time.monotonic()
    with pytest.raises(labkit.RankTimeout) as info:
        fragile.run(exchange, timeout=1.0)
    assert time.monotonic() - t0 < 3.0
    err = info.value
    assert sorted(err.stuck) == [0]
    assert err.stuck[0].startswith("in recv()")
    assert "in exchange" in err.stuck[0] and "dist.recv(buf, src=1)" in err.stuck[0]
    assert "ranks 1, 2: finished." in str(err)
    assert works(fragile) < 1.0


def test_a_busy_python_loop_is_located_too(fragile):
    def spin():
        x = 0
        while True:
            x += 1

    with pytest.raises(labkit.RankTimeout) as info:
        fragile.run(spin, timeout=0.5)
    assert all("in spin" in s and ("x += 1" in s or "while True:" in s) for s in info.value.stuck.values())
    assert works(fragile) < 1.0


@pytest.mark.parametrize("how,expect", [
    ("exit", "exited with code 3"),
    ("sigkill", "killed (SIGKILL"),
    ("segfault", "segmentation fault"),
])
def test_a_rank_dies(fragile, how, expect):
    def die(how):
        import ctypes
        import os
        import signal
        if labkit.rank() == 1:
            if how == "exit":
                os._exit(3)
            elif how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                ctypes.string_at(0)           # reads address 0: SIGSEGV
        import torch
        import torch.distributed as dist
        dist.all_reduce(torch.ones(1))

    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        fragile.run(die, how)
    assert time.monotonic() - t0 < 2.0
    err = info.value
    assert err.failures[1].type == "RankDied" and err.restarted
    first = str(err).splitlines()[1]
    assert first.startswith("--- rank 1 ") and expect in first, "the death comes first"
    others = set(err.failures) - {1}
    if others:                                # gloo noticed the dead peer before we stopped them
        assert "failed because a rank they were talking to died" in str(err)
    if how == "segfault":
        assert "in die" in str(err), "faulthandler's crash dump shows where it crashed"
    assert works(fragile) < 1.0


def test_system_exit_in_the_function_is_an_error_not_a_death(fragile):
    def fn():
        raise SystemExit(4)

    with pytest.raises(labkit.RankError, match="SystemExit") as info:
        fragile.run(fn)
    assert not info.value.restarted


def test_recovery_without_spares_still_works():
    with labkit.Cluster(2, spares=0) as c:
        with pytest.raises(labkit.RankTimeout):
            c.run(lambda: __import__("time").sleep(30), timeout=0.5)
        assert works(c) < 30


def test_restart_gives_fresh_ranks(fragile):
    fragile.push(v=1)
    fragile.restart()
    with pytest.raises(labkit.RankError, match="no variable 'v'"):
        fragile.pull("v")
    assert works(fragile) < 1.0
