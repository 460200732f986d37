"""Notebook 04's live figure counts the same bytes on every rank and every run: the activations
of ZeRO-3 ranks doing the same work are equal to the byte, twice in a row (they moved in steps of
freed weight storages before: see labkit.zero.demo._exact_meter)."""
from labkit.zero.demo import live_steps


def _memory_events(cluster):
    events = []
    stop = cluster.on_event(lambda e: events.append(e) if "memory" in e.data else None)
    try:
        cluster.run(live_steps, 3, 2, n_embd=64, vocab=512, seq=16)
    finally:
        stop()
    by_rank = {}
    for e in events:
        by_rank.setdefault(e.rank, []).append((e.data["step"], e.data["phase"], e.data["memory"]))
    return by_rank


def test_stage3_live_bytes_equal_on_every_rank_and_run(cluster):
    runs = [_memory_events(cluster) for _ in range(2)]
    first = runs[0][0]
    assert [p for _, p, _ in first] == ["after forward", "during backward", "after step"] * 2
    for run in runs:
        assert sorted(run) == list(range(cluster.world_size))
        for r, rows in run.items():
            assert rows == first, (r, rows, first)
    fwd = first[0][2]
    assert fwd["gathered"] == 0 and fwd["activations"] > 0
    assert first[1][2]["gathered"] > 0
