"""The live memory figures of notebooks 04 (ZeRO-3) and 05b (FSDP2) count the same bytes on every
rank and every run: ranks doing the same work are equal to the byte, twice in a row (activations
moved in steps of freed weight storages before: see labkit.zero.demo.exact_meter)."""
import pytest

from labkit.fsdp import demo as fsdp_demo
from labkit.zero.demo import live_steps

RUNS = {"zero3": (live_steps, (3, 2), dict(n_embd=64, vocab=512, seq=16)),
        "fsdp2": (fsdp_demo.live_steps, ("full",), {})}


def _memory_events(cluster, fn, args, kwargs):
    events = []
    stop = cluster.on_event(lambda e: events.append(e) if "memory" in e.data else None)
    try:
        cluster.run(fn, *args, **kwargs)
    finally:
        stop()
    by_rank = {}
    for e in events:
        by_rank.setdefault(e.rank, []).append((e.data["step"], e.data["phase"], e.data["memory"]))
    return by_rank


@pytest.mark.parametrize("which", list(RUNS))
def test_live_bytes_equal_on_every_rank_and_run(cluster, which):
    runs = [_memory_events(cluster, *RUNS[which]) for _ in range(2)]
    first = runs[0][0]
    assert [p for _, p, _ in first] == ["after forward", "during backward", "after step"] * 2
    same_work = (lambda rows: [(st, ph, m["activations"], m["gathered"]) for st, ph, m in rows])
    for run in runs:
        assert sorted(run) == list(range(cluster.world_size))
        for r, rows in run.items():
            assert rows == runs[0][r], (r, rows, runs[0][r])              # every category, run to run
            # across ranks: the shards may differ by padding (FSDP2 pads dim 0), the rest may not
            assert same_work(rows) == same_work(first), (r, rows, first)
    assert first[0][2]["activations"] > 0 and first[1][2]["gathered"] > 0
    # the same work in steps 0 and 1 saves the same activations
    assert first[0][2]["activations"] == first[3][2]["activations"]
    if which == "zero3":
        assert first[0][2]["gathered"] == 0          # nothing left gathered after forward
