"""The runtime at its limits: what the second reliability round found, one test per fault.

Each test failed on the runtime before its fix (see the commit that added it)."""
import os
import pathlib
import subprocess
import sys
import time

import pytest

import labkit
from support.runtime_helpers import accept_threads, children, nothing_left, own_dirs
from labkit.runtime import errors
from labkit.runtime.local import procs, zygote

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(120), pytest.mark.cluster]

MANY_FILES = r"""
import os, sys, labkit
files = [open(os.devnull) for _ in range(1100)]      # the notebook holds many files open
assert files[-1].fileno() > 1024
def fn():
    import torch, torch.distributed as dist
    t = torch.ones(1); dist.all_reduce(t); return t.item()
with labkit.Cluster(2, backend="gloo", timeout=60) as c:
    print("result", c.run(fn))
    import labkit.runtime.frames as frames
    r, w = os.pipe()
    hi = os.dup2(r, 1500)                            # frames.readable on a descriptor > 1024
    os.write(w, b"x")
    print("readable", frames.readable(hi))
"""


def test_a_notebook_with_more_than_1024_open_files_starts_a_cluster():
    p = subprocess.run([sys.executable, "-c", MANY_FILES], capture_output=True, text=True,
                       timeout=100, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "result [2.0, 2.0]" in p.stdout, p.stdout + p.stderr
    assert "readable True" in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_a_start_timeout_that_makes_no_sense_is_refused_first(bad):
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="start_timeout must be a positive number of seconds"):
        labkit.Cluster(2, start_timeout=bad)
    assert time.monotonic() - t0 < 2


def test_a_failed_start_leaves_nothing_behind(monkeypatch):
    """Whatever stops a start (here the rendezvous store cannot listen), it raises the runtime's
    own StartError and leaves no zygote, worker, accept thread or folder."""
    kids, dirs, accepting = children(), own_dirs(), accept_threads()
    def no_store(folder, gen):
        raise OSError("address already in use (a test)")
    monkeypatch.setattr(procs, "rendezvous_store", no_store)
    for _ in range(3):
        with pytest.raises(errors.StartError, match="could not start: OSError: address already"):
            labkit.Cluster(2, backend="gloo")
    nothing_left(kids, dirs, accepting, " by failed starts")


@pytest.fixture(scope="module")
def c2():
    with labkit.Cluster(2, backend="gloo", spares=2, timeout=60) as cl:
        yield cl


def test_a_huge_error_message_is_cut_and_counted(c2):
    def fn():
        if labkit.rank() == 1:
            raise ValueError("x" * 50_000_000)
        return 0
    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        c2.run(fn)
    text = str(info.value)
    assert len(text) < 30_000, len(text)
    assert "characters not shown" in text and "49,980,000" in text
    assert "rank 1" in text and "ValueError" in text
    assert time.monotonic() - t0 < 20
    assert c2.run(lambda: labkit.rank()) == [0, 1]


def test_an_exception_whose_str_fails_is_reported(c2):
    def fn():
        class Odd(Exception):
            def __str__(self):
                raise KeyError("no text")
        if labkit.rank() == 0:
            raise Odd()
    with pytest.raises(labkit.RankError, match="could not be shown"):
        c2.run(fn)
    assert c2.run(lambda: labkit.rank()) == [0, 1]


def test_an_emit_loop_is_capped_per_rank_and_counted(c2, capfd):
    """A rank that emits in a loop: the cap binds at its events or its bytes, the rest are
    counted as dropped, per rank. The loops emit a fixed number of times, several times each cap
    (they ran for 2 s each before: 12 CPU-s for the same assertions)."""
    def flood(payload, n):
        for i in range(n):
            labkit.emit(i=i, p=payload)
        return n
    old = (c2.max_events, c2.max_event_bytes)
    c2.max_events, c2.max_event_bytes = 1000, 10_000_000
    try:
        sent = c2.run(flood, "", 20_000)
        assert len(c2.events) == 2 * 1000
        err = capfd.readouterr().err
        assert "events dropped" in err and f"rank 0: {sent[0] - 1000:,}" in err, err
        c2.run(flood, "y" * 10_000, 3000)              # 10 KB payloads: the byte cap binds
        per_rank = {r: sum(1 for e in c2.events if e.rank == r) for r in (0, 1)}
        assert all(900 <= n <= 1000 for n in per_rank.values()), per_rank
        assert "events dropped" in capfd.readouterr().err
    finally:
        c2.max_events, c2.max_event_bytes = old
    c2.run(flood, "", 30_000)                           # the default cap: 10,000 per rank
    assert len(c2.events) == 2 * 10_000
    assert "events dropped" in capfd.readouterr().err


ODD_DTYPES = ["uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "complex32"]


@pytest.mark.parametrize("n", [5, 40_000], ids=["inline", "shared-memory"])
def test_every_dtype_travels_both_ways(c2, n):
    import torch
    def echo(ts):
        return [t[1:] for t in ts]                # a view: offset and strides kept too
    sent = []
    for name in ODD_DTYPES:
        dt = getattr(torch, name)
        sent.append(torch.arange(n + 1, dtype=torch.float32).to(dt))
    got = c2.run(echo, sent)
    for r in range(2):
        for name, s, g in zip(ODD_DTYPES, sent, got[r]):
            assert g.dtype == s.dtype and g.shape == (n,), name
            assert torch.equal(g.contiguous().view(torch.uint8),
                               s[1:].contiguous().view(torch.uint8)), name


def test_numpy_arrays_and_bytes_take_the_shared_memory_path():
    """A big numpy array or bytes object is written once into shared memory, not pickled into
    the message (which went through the socket once per rank: 13 s for 512 MB to 4 ranks)."""
    import numpy as np
    from labkit.runtime import shm, wire
    if not shm.ENABLED:
        pytest.skip("no memfd on this system")
    big = np.arange(2**20, dtype=np.float64).reshape(1024, 1024)
    for value in (big, np.asfortranarray(big), bytes(2**22), bytearray(2**22), [bytes(2**22)]):
        keep = []
        data = wire.dumps_values({"a": value}, keep=keep)
        try:
            assert len(data) < 4096, (type(value), len(data))
            back = wire.loads(data)["a"]
            if isinstance(value, np.ndarray):
                assert back.dtype == value.dtype and (back == value).all()
            else:
                assert type(back) is type(value) and back == value
        finally:
            shm.close(keep)


def test_numpy_and_bytes_reach_every_rank(c2):
    import numpy as np
    def look(a, b):
        return float(a.sum()), a.dtype.str, a.shape, len(b), b[:1]
    a = np.arange(100_000, dtype=np.int32).reshape(100, 1000)
    got = c2.run(look, a, b"\x07" * 100_000)
    assert got == [(float(a.sum()), "<i4", (100, 1000), 100_000, b"\x07")] * 2


@pytest.mark.skipif(not zygote.ENABLED, reason="no zygote without fork and pidfd (LABKIT_PORTABLE=1, macOS)")
def test_a_killed_zygote_is_named_as_killed(capfd, monkeypatch):
    """(A zygote of this cluster's own: only its parent, the notebook, reads how it ended; the
    learner's zygote: test_runtime_userzygote.py.)"""
    import signal
    monkeypatch.setenv("LABKIT_ZYGOTE", "cluster")
    with labkit.Cluster(2, backend="gloo", spares=1) as c:
        c.wait_for_spares()
        os.kill(c.source.pool.zygote.proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        while "forks ranks quickly has stopped" not in (err := capfd.readouterr().err):
            assert time.monotonic() - t0 < 10
            time.sleep(0.1)
        assert "killed (SIGKILL" in err and "closed its connection" not in err, err
        assert c.run(lambda: labkit.rank()) == [0, 1]


def test_cpp_log_lines_are_folded_into_one_line_per_rank(c2, capfd):
    def fn():
        print("mine")
        os.write(2, b"[E1201 11:08:47.500957381 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed\n"
                    b"terminate called after throwing an instance of 'c10::Error'\n"
                    b"  what():  Connection closed by peer\nframe #0: c10::Error::Error\n")
        print("also mine")
    capfd.readouterr()
    c2.run(fn)
    out = capfd.readouterr().out
    assert "[rank 1] mine" in out and "[rank 1] also mine" in out
    assert "ProcessGroupGloo.cpp" not in out and "frame #0" not in out, out
    assert out.count("torch's C++ log: 4 lines folded, e.g. 'what():  Connection closed by peer'") == 2, out
    assert len(c2.native_log(0)) == 4 and c2.native_log(0)[0].startswith("[E1201")
