"""Shared fixtures: long-lived clusters, so each test file does not pay a cold start.

`cluster2` and `cluster4` are gloo clusters of 2 and 4 ranks shared by the whole session;
`cluster1` and `cluster3` live for one test module (few modules need them). None has spares:
a test that breaks one gets fresh ranks through a cold start. Tests that deliberately crash
or hang ranks make their own Cluster.
"""
import pytest

import labkit


def _shared(n: int):
    with labkit.Cluster(n, backend="gloo", spares=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def cluster1():
    yield from _shared(1)


@pytest.fixture(scope="session")
def cluster2():
    yield from _shared(2)


@pytest.fixture(scope="module")
def cluster3():
    yield from _shared(3)


@pytest.fixture(scope="session")
def cluster4():
    yield from _shared(4)


@pytest.fixture(params=[2, 4], ids=["2ranks", "4ranks"])
def cluster(request):
    """Parametrises a test over the shared 2- and 4-rank clusters."""
    return request.getfixturevalue(f"cluster{request.param}")
