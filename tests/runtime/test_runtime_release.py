"""A rank is told to free its result's shared memory only when its result used some (issue 36:
the message to every rank after every run was about a quarter of a trivial run's round trip).
"""
import os
import pickle
import time

import pytest

import labkit

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def c():
    with labkit.Cluster(2, backend="gloo", spares=0, timeout=60) as cl:
        yield cl


def memfds(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:labkit")
        except OSError:
            pass
    return n


def counted_sends(c):
    sent = {}
    for w in c.ranks:
        real = w.conn.send_bytes                  # every message goes out through it, pickled
        sent[w.pid] = []
        w.conn.send_bytes = lambda data, real=real, box=sent[w.pid]: (
            box.append(type(pickle.loads(data)).__name__), real(data))[1]
    return sent


def big():
    import torch
    return torch.ones(1 << 18)


def test_a_rank_frees_its_result_segment_as_soon_as_the_notebook_has_it(c):
    if not c.source.local:
        pytest.skip("results are pickled through the socket here (ranks in a user namespace)")
    out = c.run(big)
    assert [float(t.sum()) for t in out] == [float(1 << 18)] * 2
    deadline = time.monotonic() + 10
    while any(memfds(w.pid) for w in c.ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [memfds(w.pid) for w in c.ranks] == [0, 0], "a rank still holds its result's segment"


def test_a_trivial_run_sends_each_rank_its_task_and_nothing_else(c):
    sent = counted_sends(c)
    try:
        assert c.run(lambda: None) == [None, None]
        assert c.run(big)[0].numel() == 1 << 18
    finally:
        for w in c.ranks:
            del w.conn.send_bytes
    from labkit.runtime import shm
    through_shm = c.source.local and shm.ENABLED     # else results are pickled through the socket
    want = ["Task", "Task", "Release"] if through_shm else ["Task", "Task"]
    assert list(sent.values()) == [want, want]
