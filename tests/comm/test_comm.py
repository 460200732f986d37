"""labkit.comm: every collective against torch.distributed on 1-4 gloo ranks, the byte
counter against the formulas, recorded runs, the benchmark's arithmetic."""
import pytest
import torch

import labkit
from labkit.comm import formulas, runs

LENGTHS = [0, 1, 2, 3, 5, 7, 1001, 65537]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]


@pytest.fixture(params=[1, 2, 3, 4], ids=lambda n: f"{n}ranks")
def any_cluster(request):
    return request.getfixturevalue(f"cluster{request.param}")


# -- layer 1: formulas ------------------------------------------------------------------
def test_chunk_bounds_cover_the_tensor():
    for length in range(0, 30):
        for parts in range(1, 6):
            b = formulas.chunk_bounds(length, parts)
            assert b[0][0] == 0 and b[-1][1] == length and len(b) == parts
            sizes = [y - x for x, y in b]
            assert max(sizes) - min(sizes) <= 1 and all(b[i][1] == b[i + 1][0] for i in range(parts - 1))


def test_ring_traffic_formulas():
    for n in range(1, 9):
        S = 4 * n * 1000
        exact = [formulas.ring_bytes_exact(S // 4, n, 4, r) for r in range(n)]
        assert exact == [formulas.ring_bytes_per_rank(S, n)] * n          # 2(N-1)/N x S
        assert formulas.naive_bytes(S, n, 0) == ((n - 1) * S, (n - 1) * S) or n == 1
    assert sum(formulas.ring_bytes_exact(7, 4, 4, r) for r in range(4)) == 2 * 3 * 7 * 4  # uneven
    assert formulas.step_traffic(70e9, 2) == 280e9                       # the notes' 70B example
    assert formulas.busbw("ring", 1e6, 1e-3, 4) == (1e9, 1.5e9)
    assert formulas.busbw("broadcast", 1e6, 1e-3, 4)[1] == 1e9


# -- layer 3: collectives against torch.distributed --------------------------------------
def _compare_all(lengths, dtypes):
    import torch.distributed as dist
    from labkit import comm
    r, n = labkit.rank(), labkit.world_size()
    bad = []

    def check(name, got, want, dt, k):
        if dt.is_floating_point:
            tol = 4 * n * torch.finfo(dt).eps
            ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol * 50)
        else:
            ok = torch.equal(got, want)
        if not ok:
            bad.append(f"{name} length {k} {dt} rank {r}")

    for k in lengths:
        for name in dtypes:
            dt = getattr(torch, name)
            g = torch.Generator().manual_seed(k * 101 + r)
            x = (torch.randn(k, generator=g) * 10).to(dt) if dt.is_floating_point \
                else torch.randint(0, 100, (k,), generator=g).to(dt)
            want = x.clone()
            dist.all_reduce(want)
            for fname, fn in [("ring", comm.ring_all_reduce), ("simple", comm.ring_all_reduce_simple),
                              ("naive", comm.naive_all_reduce),
                              ("ring-pieces", lambda t: comm.ring_all_reduce(t, piece_bytes=4096))]:
                t = x.clone()
                assert fn(t) is t
                check(fname, t, want, dt, k)
            a, b = comm.chunk_bounds(k, n)[r]
            t = x.clone()
            check("reduce_scatter", comm.ring_reduce_scatter(t), want[a:b], dt, k)
            t = torch.zeros_like(x)
            t[a:b] = want[a:b]
            check("all_gather", comm.ring_all_gather(t), want, dt, k)
    x = torch.arange(12.0).reshape(3, 4).t() + r                # not contiguous, 2-D
    want = x.clone()
    dist.all_reduce(want)
    for fn in (comm.ring_all_reduce, comm.ring_all_reduce_simple, comm.naive_all_reduce):
        t = x.clone()
        fn(t)
        check(fn.__name__ + " 2-D transposed", t, want, torch.float32, 12)
    return bad


def test_collectives_match_torch(any_cluster):
    results = any_cluster.run(_compare_all, LENGTHS, DTYPES, timeout=120)
    assert results == [[]] * any_cluster.world_size


def _on_subgroup(ranks):
    import torch.distributed as dist
    from labkit import comm
    group = dist.new_group(ranks)
    if labkit.rank() not in ranks:
        return True
    x = torch.arange(10, dtype=torch.int64) * (labkit.rank() + 1)
    want = x.clone()
    dist.all_reduce(want, group=group)
    out = []
    for fn in (comm.ring_all_reduce, comm.ring_all_reduce_simple, comm.naive_all_reduce):
        t = x.clone()
        fn(t, group=group)
        out.append(torch.equal(t, want))
    return all(out)


def test_collectives_on_a_subgroup(cluster4):
    assert all(cluster4.run(_on_subgroup, [0, 2, 3], timeout=60))


# -- layer 4: traffic against the formulas ------------------------------------------------
def _overhead():
    from labkit.comm import traffic
    return traffic.overhead_per_message()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_bytes_on_the_wire_match_the_formulas(request, n):
    c = request.getfixturevalue(f"cluster{n}")
    ovh = c.run(_overhead, timeout=60)[0]
    S = (1 << 20) + 12                                        # not divisible by 3 or 8 chunks
    rows = runs.traffic_rows(c, S, ops=["ring_all_reduce", "ring_all_reduce_simple",
                                           "naive_all_reduce", "torch_all_reduce"])
    for row in rows:
        what = f"N={n} {row['op']} rank {row['rank']}"
        if row["op"] == "torch_all_reduce":                   # gloo's own ring, not counted by labkit
            assert row["payload_sent"] == 0, what
            assert abs(row["sent"] - formulas.ring_bytes_per_rank(row["bytes"], n)) < 0.01 * row["bytes"], what
            continue
        assert row["payload_sent"] == row["formula"], what    # labkit's counter: exact
        if row["op"] == "naive_all_reduce":
            assert row["payload_received"] == ((n - 1) * S if row["rank"] == 0 else S), what
        else:                                                 # what the left-hand neighbour sent
            assert row["payload_received"] == formulas.ring_bytes_exact(S // 4, n, 4, (row["rank"] - 1) % n), what
        wire = row["formula"] + ovh["per_send"] * row["messages_sent"] + ovh["per_recv"] * row["messages_received"]
        assert abs(row["sent"] - wire) <= 2 * ovh["per_send"], (what, row["sent"], wire)
        # received: every header, and the receive notices of our sends that arrived in time
        extra = row["received"] - row["payload_received"] - ovh["per_send"] * row["messages_received"]
        assert -ovh["per_recv"] <= extra <= ovh["per_recv"] * row["messages_sent"] + 2 * ovh["per_send"], \
            (what, extra)
    ring = [r["sent"] / S for r in rows if r["op"] == "ring_all_reduce"]
    assert max(ring) - min(ring) < 0.01 and abs(ring[0] - 2 * (n - 1) / n) < 0.01
    root = [r for r in rows if r["op"] == "naive_all_reduce" and r["rank"] == 0][0]
    assert abs(root["sent"] / S - (n - 1)) < 0.01 and abs(root["received"] / S - (n - 1)) < 0.01


def test_single_rank_moves_nothing(cluster1):
    rows = runs.traffic_rows(cluster1, 4096, ops=["ring_all_reduce", "naive_all_reduce"])
    assert [(r["sent"], r["received"], r["payload_sent"]) for r in rows] == [(0, 0, 0)] * 2


# -- recorded runs --------------------------------------------------------------------------
@pytest.mark.parametrize("fast", [False, True], ids=["simple", "fast"])
def test_recorded_ring_replays_to_the_sum(cluster3, fast):
    from labkit.comm import plots
    events = runs.record_ring(cluster3, length=10, fast=fast)
    frames = plots.ring_frames(events, 3)
    assert len(frames) == 1 + 2 * 2
    assert all(cell == frozenset({0, 1, 2}) for row in frames[-1]["state"] for cell in row)
    after_rs = frames[2]["state"]                              # rank r owns chunk r after reduce-scatter
    assert [after_rs[r][r] for r in range(3)] == [frozenset({0, 1, 2})] * 3
    for e in events:
        assert e["recv_from"] == (e["rank"] - 1) % 3 and e["send_to"] == (e["rank"] + 1) % 3
        assert e["t1"] >= e["t0"]
    table = runs.events_table(events, first=4)                 # times from the start, not the clock
    assert len(table.rows) == 4 and "more events not shown" in table
    assert all(0 <= float(row[6]) < 60e3 for row in runs.events_table(events).rows)


def test_busbw_sweep_table_and_ratio(cluster2):
    from labkit.comm import busbw
    rows = busbw.sweep(cluster2, sizes=[4096, 65536], iters=2, warmup=1)
    assert {r["op"] for r in rows} == set(busbw.OPS) and len(rows) == 2 * len(busbw.OPS)
    for r in rows:
        assert r["busbw"] == pytest.approx(r["algbw"] * formulas.BUSBW_FACTOR[
            busbw.FACTOR_OP.get(r["op"], r["op"])](2))
    text = busbw.table(rows)
    assert "labkit ring / torch all_reduce busbw" in text and "| 64K | ring_all_reduce |" in text.markdown()
    assert busbw.ratio(rows, 65536) > 0
    with pytest.raises(ValueError, match="unknown op"):
        busbw.sweep(cluster2, sizes=[4096], ops=["all_reduce", "allreduce"])


def _rows(times):
    """busbw rows with these times: {(op, size): seconds}."""
    return [{"op": op, "bytes": size, "seconds": t, "world_size": 4} for (op, size), t in times.items()]


def test_busbw_observations_say_only_what_the_rows_show():
    from labkit.comm import busbw
    quiet = _rows({("all_reduce", 4096): 1.0, ("ring_all_reduce", 4096): 1.05,
                   ("naive_all_reduce", 4096): 1.0})
    assert busbw.observations(quiet) == []                    # within 10 %: nothing to say
    rows = _rows({("all_reduce", 4096): 1.0, ("ring_all_reduce", 4096): 3.0, ("naive_all_reduce", 4096): 2.0,
                  ("all_reduce", 1 << 20): 1.0, ("ring_all_reduce", 1 << 20): 1.0,
                  ("naive_all_reduce", 1 << 20): 2.0})
    said = busbw.observations(rows)
    assert said == ["labkit's ring took longer than torch's all_reduce at 4K (the ring 3.0x the time)",
                    "the naive all-reduce beat the ring at 4K (the ring 1.5x the time)"]


def test_busbw_plateaus_name_where_each_op_levels_off():
    from labkit.comm import busbw
    rows = [{"op": "all_reduce", "bytes": 1 << k, "busbw": b} for k, b in ((12, 1.0), (16, 5.0), (20, 9.0), (24, 10.0))]
    rows += [{"op": "ring_all_reduce", "bytes": 1 << k, "busbw": b} for k, b in ((12, 1.0), (24, 10.0))]
    assert busbw.plateaus(rows) == [
        "all_reduce: busbw within 80% of its best (1e-08 GB/s) from 1M on",
        "ring_all_reduce: busbw within 80% of its best (1e-08 GB/s) only at the largest size, 16M: "
        "no level stretch in this range"]
    dip = [{"op": "all_reduce", "bytes": 1 << k, "busbw": b} for k, b in ((12, 1.0), (20, 10.0), (24, 5.0))]
    assert busbw.plateaus(dip) == ["all_reduce: busbw within 80% of its best (1e-08 GB/s) at 1M, but not "
                                   "level in this range: at 16M it is 50% of that"]


def test_bench_cli_is_a_thin_layer_over_comm_busbw():
    from labkit.bench import collectives
    from labkit.comm import busbw
    assert collectives.sweep is busbw.sweep and collectives.table is busbw.table
    assert collectives.parse_size("4K") == 4096 and collectives.parse_size("1M") == 1 << 20


# -- 2(N-1) sends per rank: counted at torch.distributed, not by labkit's own counter ----------
def _count_sends(length, piece_bytes):
    """Per ring: (non-empty sends this rank posted, the sum right?). dist.isend / dist.send are
    wrapped for the call, so what is counted is what reached torch.distributed."""
    import torch.distributed as dist
    from labkit import comm
    real = {"isend": dist.isend, "send": dist.send}
    sent = []

    def counting(name):
        def call(tensor, *a, **k):
            sent.append(tensor.numel() > 0)
            return real[name](tensor, *a, **k)
        return call
    x = torch.arange(length, dtype=torch.float64) * (labkit.rank() + 1)
    want = x.clone()
    dist.all_reduce(want)
    out = {}
    runs_ = {"simple": comm.ring_all_reduce_simple,
             "pipelined, 1 piece": comm.ring_all_reduce,
             "pipelined, 3 pieces": lambda t: comm.ring_all_reduce(t, piece_bytes=piece_bytes)}
    for name, fn in runs_.items():
        t, sent[:] = x.clone(), []
        dist.isend, dist.send = counting("isend"), counting("send")
        try:
            fn(t)
        finally:
            dist.isend, dist.send = real["isend"], real["send"]
        out[name] = (sum(sent), len(sent), torch.equal(t, want))
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ring_all_reduce_makes_2_n_minus_1_sends_per_rank(request, n):
    c = request.getfixturevalue(f"cluster{n}")
    length = 1200                                   # chunks of 1200 / n elements, none empty
    piece_bytes = -(-length // n * 8 // 3)          # 3 pieces per chunk (float64)
    for rank, res in enumerate(c.run(_count_sends, length, piece_bytes, timeout=60)):
        steps = 2 * (n - 1)
        assert res["simple"] == (steps, steps, True), (n, rank, res)
        assert res["pipelined, 1 piece"] == (steps, steps, True), (n, rank, res)
        assert res["pipelined, 3 pieces"] == (3 * steps, 3 * steps, True), (n, rank, res)


# -- the default collective timeouts notebooks 00 and 11 quote, read from torch itself ---------
def test_default_collective_timeouts_the_course_quotes():
    """Notebooks 00 and 11: a collective that never completes fails after the process group's
    timeout, 10 minutes for NCCL and 30 for the other backends (the notes say 30 for NCCL)."""
    from datetime import timedelta
    import torch.distributed as dist
    from torch.distributed import constants, distributed_c10d
    assert constants.default_pg_timeout == timedelta(minutes=30)
    assert distributed_c10d._get_default_timeout(dist.Backend.GLOO) == timedelta(minutes=30)
    if constants.default_pg_nccl_timeout is None:
        pytest.skip("this torch has no NCCL (the CPU wheel): NCCL's default of 10 minutes is "
                    "checked only where NCCL is compiled in (a GPU machine)")
    assert constants.default_pg_nccl_timeout == timedelta(minutes=10)
    assert distributed_c10d._get_default_timeout(dist.Backend.NCCL) == timedelta(minutes=10)


# -- the torch 2.13 rename, picked in one place (labkit.comm.compat) ---------------------------
def test_compat_picks_the_new_name_else_the_old(monkeypatch):
    import torch.distributed as dist
    from labkit.comm import compat
    calls = []
    for name in ("reduce_scatter_single", "reduce_scatter_tensor", "all_gather_single", "all_gather_into_tensor"):
        monkeypatch.setattr(dist, name, lambda out, inp, *a, _n=name, **k: calls.append((_n, k)), raising=False)
    compat.reduce_scatter_tensor("out", "in", group="g")
    compat.all_gather_into_tensor("out", "in")
    monkeypatch.delattr(dist, "reduce_scatter_single")
    monkeypatch.delattr(dist, "all_gather_single")
    compat.reduce_scatter_tensor("out", "in")
    compat.all_gather_into_tensor("out", "in", group="g")
    assert calls == [("reduce_scatter_single", {"group": "g"}), ("all_gather_single", {}),
                     ("reduce_scatter_tensor", {}), ("all_gather_into_tensor", {"group": "g"})]


def test_lazy_names_load_on_first_use():
    import subprocess
    import sys
    code = ("import sys, labkit.comm as c\n"
            "assert 'labkit.comm.ring_fast' not in sys.modules and 'torch' not in sys.modules\n"
            "f = c.ring_all_reduce\n"
            "assert f.__module__ == 'labkit.comm.ring_fast' and vars(c)['ring_all_reduce'] is f\n"
            "assert c.compat.__name__ == 'labkit.comm.compat' and 'ring_all_gather' in dir(c)\n"
            "try:\n    c.nothing\nexcept AttributeError as e:\n    assert \"'labkit.comm' has no attribute 'nothing'\" in str(e)\n"
            "else:\n    raise SystemExit('no AttributeError')\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_traffic_verdicts_say_ok_or_miss(capsys):
    S = 4 << 20
    row = lambda n, op, rank, sent, formula: dict(world_size=n, op=op, rank=rank, sent=sent,  # noqa: E731
                                                  formula=formula, bytes=S)
    f = formulas.ring_bytes_exact(S // 4, 2, 4, 0)
    ok = [row(2, "ring_all_reduce", 0, f + 288, f), row(2, "ring_all_reduce", 1, f + 288, f)]
    assert runs.traffic_verdicts(ok) is True
    assert capsys.readouterr().out.startswith("ok: N=2 ring_all_reduce: sent / S per rank 1.0001, formula 1.0000")
    bad = ok + [row(4, "naive_all_reduce", 0, 2 * S, 3 * S)]       # the root sent 2 S, not 3 S
    assert runs.traffic_verdicts(bad) is False
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ok: N=2") and out[1].startswith("MISS: N=4 naive_all_reduce") and len(out) == 2
    assert "-4,194,304 B on rank 0" in out[1]
