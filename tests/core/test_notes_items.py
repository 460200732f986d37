"""The notes' items that were only shown, each checked: what TP and PP divide on a rank, ...
(issue 33 section 6). Counts are exact; times are ratios from one run."""
import pytest

pytestmark = pytest.mark.cluster


def test_tp_divides_the_block_flops_and_weights_by_t(cluster4):
    for r in cluster4.run(compute_split_runner):
        assert r["t"] == 4
        assert r["flops"] * 4 == r["one device flops"], r           # exact: integer FLOP counts
        assert r["weights split"] * 4 + r["weights replicated"] == r["one device weights"], r
        assert 0 < r["weights replicated"] < r["weights split"], r  # layer norms, row biases


def test_pp_stage_holds_its_layers_share_of_the_model_state(cluster4):
    for sizes in ([2, 2, 2, 2], [1, 1, 5, 1]):
        res = cluster4.run(stage_memory_runner, sizes)
        whole = res[0]["one process model state"]
        assert sum(r["model state"] for r in res) == whole, (sizes, res)
        for r, k in zip(res, sizes):
            assert r["layers"] == k and r["model state"] * 8 == whole * k, (sizes, r)
            assert r["params"] * 8 == res[0]["one process params"] * k, (sizes, r)


def compute_split_runner():
    from labkit.tp.split import compute_split
    return compute_split()


def stage_memory_runner(sizes):
    from labkit.pipeline.stage_memory import stage_memory
    return stage_memory(sizes=sizes)


def _profiled(name):
    from labkit.throughput.steps import profiled_scenario
    return profiled_scenario(name)


def test_profiled_share_verdict_passes_on_communication_and_fails_on_slow_data(cluster2, capsys):
    """Shares are ratios inside one run: the communication run spends 30-60 % in the all-reduce
    by the profiler here (the scenario's 8 MB against tiny compute; its low end under load), the
    slow-data run about 1 % (it sleeps in the loader). The test's bar, 20 %, leaves room for a
    loaded machine and still sits 20x above the slow-data run."""
    from labkit.throughput.profile import share_verdict
    comm = cluster2.run(_profiled, "communication")
    assert all("gloo:all_reduce" in r["ops"] or "c10d::allreduce_" in r["ops"] for r in comm), comm
    assert share_verdict(comm, threshold=0.2), comm
    assert capsys.readouterr().out.splitlines()[-1].startswith("ok: communication share above 20%")
    data = cluster2.run(_profiled, "slow data")
    assert not share_verdict(data, threshold=0.2), data
    assert capsys.readouterr().out.splitlines()[-1].startswith("MISS: ")
    assert all(r["profiler"] < 0.1 and r["timers"] < 0.1 for r in data), data


# -- 16: the ring is bandwidth-bound for large messages, its latency term grows with 2(N-1) ----

SLOW = (20e-3, 10e6)     # 20 ms per message, 10 MB/s (as notebook 02): loopback's own costs are a few % of these


@pytest.mark.serial
def test_ring_latency_grows_with_steps_bandwidth_with_bytes(cluster4):
    from labkit.comm import latency
    ring = latency.fit(cluster4.run(latency.times, link=SLOW)[0])
    assert latency.check(ring), latency.ratios(ring)
    assert 0.7 < ring[0]["alpha"] / (2 * SLOW[0]) < 1.5, ring        # N = 2: two messages of 10 ms
    naive = latency.fit(cluster4.run(latency.times, link=SLOW, op="naive", repeats=3)[0])
    assert not latency.check(naive), latency.ratios(naive)           # its bytes grow with N - 1


def _model_rows(alpha_of_n, beta_of_n, ns=(2, 3, 4), sizes=(64, 1 << 20)):
    return [{"N": n, "bytes": s, "times": [alpha_of_n(n) + beta_of_n(n) * s]} for n in ns for s in sizes]


def test_latency_check_fails_on_a_constant_latency_model():
    from labkit.comm import latency
    ring = _model_rows(lambda n: 2 * (n - 1) * 1e-3, lambda n: 2 * (n - 1) / n * 1e-8)
    assert latency.check(latency.fit(ring))
    flat = _model_rows(lambda n: 2e-3, lambda n: 2 * (n - 1) / n * 1e-8)       # latency not growing
    assert not latency.check(latency.fit(flat))
    steps = _model_rows(lambda n: 2 * (n - 1) * 1e-3, lambda n: 2 * (n - 1) * 1e-8)  # bytes x steps
    assert not latency.check(latency.fit(steps))


# -- 51: tiny buckets pay a start-up cost per call ---------------------------------------------

def _calls():
    from labkit.ddp.bucket_cost import call_sweep
    return call_sweep()


@pytest.mark.serial
def test_tiny_buckets_pay_a_startup_cost_per_call(cluster4, capsys):
    """The same 1 MiB in 64 calls against 1: 45-110x as long here (loaded 2 cores); the bar, 3x,
    is what a start-up cost of 1/32 of one call's time would give, far below any run seen."""
    from labkit.ddp import bucket_cost
    rows = cluster4.run(_calls)[0]
    assert [r["calls"] for r in rows] == [64, 16, 4, 1] and len({r["bytes"] for r in rows}) == 1
    assert bucket_cost.startup_verdict(rows), rows
    assert bucket_cost.per_call(rows)["call_s"] > 0
    times = [min(r["times"]) for r in rows]
    assert times[0] > times[2] > times[3], times                  # more calls, longer


def test_startup_verdict_fails_without_a_per_call_cost(capsys):
    from labkit.ddp import bucket_cost
    flat = [{"cap_mb": 1 / c, "calls": c, "bytes": 1 << 20, "times": [0.010]} for c in (64, 16, 4, 1)]
    assert not bucket_cost.startup_verdict(flat)                     # bytes alone: no start-up cost
    costly = [dict(r, times=[0.010 + 0.002 * r["calls"]]) for r in flat]
    assert bucket_cost.startup_verdict(costly)
    assert bucket_cost.per_call(costly)["call_s"] == pytest.approx(0.002)


# -- N4: streaming speeds up a slow data set --------------------------------------------------

def _stream(**kw):
    import labkit
    from labkit.throughput.data import stream_vs_preload
    return stream_vs_preload(**kw) if labkit.rank() == 0 else None


@pytest.mark.serial
def test_streaming_starts_sooner_and_workers_shorten_the_pass(cluster2, capsys):
    """Reads are sleeps: without workers the first step comes after 8 of 96 items (ideal 12x;
    measured 12x here under load), asserted at 4x. With 4 workers the pass is 2-2.7x shorter
    here (ideal 4x, their fork included), asserted at 1.3x."""
    from labkit.throughput.data import stream_verdict
    alone = cluster2.run(_stream, num_workers=0)[0]
    assert stream_verdict(alone), alone
    workers = cluster2.run(_stream, num_workers=4)[0]
    assert stream_verdict(workers), workers
    one_batch = cluster2.run(_stream, num_workers=0, batch=96)[0]   # one batch: nothing to start early
    assert not stream_verdict(one_batch), one_batch


# -- 35: ZeRO-3 slower than DDP on a slow link ------------------------------------------------

def _race(link):
    from labkit.zero.link_race import race
    return race(link=link)


@pytest.mark.serial
def test_zero3_slower_than_ddp_on_a_slow_link_as_the_planner_predicts(cluster4, capsys):
    """5 MB/s: the sleeps dominate (about 0.7 s of DDP traffic against ~0.05 s of compute), so the
    ratio sits near 1.5 (1.53-1.61 here), the planner's 1.55-1.58 once ZeRO-3's loopback extra
    (0.06-0.25 s, more on a busy machine) is added; asserted within 25 %."""
    from labkit.zero.link_race import predicted_ratio, race_prediction, race_verdict
    result = cluster4.run(_race, (0.0, 5e6))[0]
    assert race_verdict(result), result
    assert result["loopback zero3 s"] < result["zero3 s"] and result["loopback ddp s"] < result["ddp s"], result
    assert predicted_ratio(result["loopback ddp s"], result["param bytes"], 4, 100e9) == pytest.approx(1.0)
    # ZeRO-3's loopback extra is in the prediction: without it the planner alone says about 1.45
    assert race_prediction(result) > predicted_ratio(result["loopback ddp s"], result["param bytes"], 4, 5e6)


def test_planner_ratio_follows_the_bytes_only_when_the_link_is_slow():
    from labkit.zero.link_race import predicted_ratio
    assert predicted_ratio(0.1, 4e6, 4, 1e3) == pytest.approx(1.5, rel=1e-3)     # traffic >> compute
    assert predicted_ratio(0.1, 4e6, 4, 1e12) == 1.0                          # traffic hidden
