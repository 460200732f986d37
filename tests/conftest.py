"""Shared fixtures: long-lived clusters, so each test file does not pay a cold start.

`cluster2` and `cluster4` are gloo clusters of 2 and 4 ranks shared by the whole session
(no spares: a test that breaks one gets fresh ranks through a cold start). Tests that
deliberately crash or hang ranks make their own Cluster.
"""
import pytest

import labkit


@pytest.fixture(scope="session")
def cluster2():
    with labkit.Cluster(2, backend="gloo", spares=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def cluster4():
    with labkit.Cluster(4, backend="gloo", spares=0, timeout=120) as c:
        yield c


@pytest.fixture(params=[2, 4], ids=["2ranks", "4ranks"])
def cluster(request):
    """Parametrises a test over the shared 2- and 4-rank clusters."""
    return request.getfixturevalue(f"cluster{request.param}")
