"""The ring checker's case on a group that does not start at global rank 0 (ranks 1..world-1):
a ring that stops half-way there leaves a message the tidy-up must meet on the right global
rank (the log names peers by group rank), so the next check runs on the same ranks."""
import os

import pytest
import torch.distributed as dist

import labkit.check
from check_corpus import ring


def _stops_on_the_shifted_group(world_peers):
    """A right ring, except on the shifted group: there group rank 0 posts one message that
    nothing receives (on the group, or on the whole world), then every rank raises."""
    def fn(tensor, group=None):
        if group is None or dist.get_global_rank(group, 0) == 0:
            return ring.right_notebook(tensor, group)
        if dist.get_rank(group) == 0:
            if world_peers:
                req = dist.isend(tensor.view(-1)[:2], dst=dist.get_global_rank(group, 1))
            else:
                req = dist.isend(tensor.view(-1)[:2], group=group, group_dst=1)
            req.waited = True               # a dropped request is not the mistake under test
        raise ValueError("stopped half-way")
    return fn


@pytest.mark.cluster
@pytest.mark.parametrize("world_peers", [False, True], ids=["on-group", "on-world"])
def test_a_ring_stopped_half_way_on_the_shifted_group_leaves_no_message(capsys, cluster4,
                                                                         world_peers):
    pids = cluster4.run(os.getpid)
    ok = labkit.check.ring_all_reduce(_stops_on_the_shifted_group(world_peers), cluster=cluster4,
                                      timeout=30)
    line = capsys.readouterr().out.strip()
    assert ok is False and "global ranks 1..3" in line and "stopped half-way" in line, line
    for answer, fn in ring.RIGHT[:2]:
        assert labkit.check.ring_all_reduce(fn, cluster=cluster4, timeout=30), \
            (answer, capsys.readouterr().out)
    assert cluster4.run(os.getpid) == pids


def test_the_shifted_case_runs_last_and_only_where_it_can():
    from labkit.check.comm import _cases
    assert [c for c in _cases(2) if c[0] == "shifted"] == []
    assert _cases(4)[-1] == ("shifted", 3, 7, "float32") and _cases(4)[0][0] == 2
