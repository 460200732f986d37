"""labkit.runtime.ports: ports for a server that binds them later come from below the ephemeral
range (where no outgoing connection and no bind to port 0 can take them), are free when handed
out, and are distinct; and every kernel a test process starts gets such ports (conftest.py)."""
import random
import socket

import pytest

from labkit.runtime import ports


def test_ports_are_below_the_ephemeral_range_distinct_and_free():
    lo, _ = ports.ephemeral_range()
    got = ports.free_ports(20)
    assert len(set(got)) == 20
    assert all(ports.LOWEST <= p < lo for p in got), (got, lo)
    for p in got:                                    # each can be bound now (and is let go again)
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_never_handed_out(monkeypatch):
    held_port = ports.free_ports(1)[0]
    with socket.socket() as held:
        held.bind(("127.0.0.1", held_port))
        held.listen()
        # the candidates come in this order: the port in use first
        monkeypatch.setattr(ports.random, "sample",
                            lambda pop, k: [held_port] + [p for p in pop if p != held_port][:k - 1])
        got = ports.free_ports(3)
    assert held_port not in got and len(set(got)) == 3


def test_without_room_below_the_range_the_kernel_chooses(monkeypatch):
    real_lo, _ = ports.ephemeral_range()
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.LOWEST + 10, 60999))
    got = ports.free_ports(2)
    assert len(set(got)) == 2
    assert all(p >= real_lo for p in got), got       # bound to port 0: the kernel's own range


def test_kernels_started_by_tests_get_ports_below_the_ephemeral_range():
    """conftest.py's pytest_configure: jupyter_client's port cache, which every KernelManager of
    this process uses (nbval's included), hands out ports below the range, each once."""
    connect = pytest.importorskip("jupyter_client.connect")
    cache = connect.LocalPortCache.instance()
    lo, _ = ports.ephemeral_range()
    got = [cache.find_available_port("127.0.0.1") for _ in range(5)]
    try:
        assert len(set(got)) == 5 and all(p < lo for p in got), (got, lo)
    finally:
        for p in got:
            cache.return_port(p)
