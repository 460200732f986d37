"""ZB-V and DualPipeV (two chunks per rank in a V): as data, against the papers, on the ranks."""
import pytest

from labkit.pipeline import (build, first_stage_activations, held_in_order, simulate, validate, with_comms)
from labkit.pipeline.formulas import idle_per_rank
from labkit.pipeline.schedules import Schedule
from labkit.pipeline.schedules_v import dualpipe, dualpipe_v, zb_v

CASES = [(2, 4), (2, 8), (3, 7), (4, 8), (4, 16), (8, 16)]


@pytest.mark.parametrize("p,m", CASES)
def test_v_layout_each_rank_holds_the_first_and_last_parts_of_its_v(p, m):
    s = zb_v(p, m)
    assert [s.vstage(r, c) for r in range(p) for c in (0, 1)] == [x for r in range(p) for x in (r, 2 * p - 1 - r)]
    assert all(s.place(s.vstage(r, c)) == (r, c) for r in range(p) for c in (0, 1))
    with pytest.raises(ValueError, match="exactly 2 chunks"):
        Schedule("x", p, m, 3, [], layout="v")


@pytest.mark.parametrize("p,m", CASES)
def test_zb_v_valid_zero_bubble_in_the_papers_convention_and_1f1b_memory(p, m):
    s = zb_v(p, m)
    assert validate(s) == [] and validate(with_comms(s), blocking_sends=False) == []
    t = simulate(s, forward=0.5, backward=0.5, weight=0.5)       # F = I = W per chunk
    assert t.span_bubble == pytest.approx(0.0)                     # Qi et al. 2024, sec. 6
    # the formula's 0 is the simulated idle between each rank's first and last action
    first = [min(a for a, _, _ in ivs) for ivs in t.intervals]
    last = [max(b for _, b, _ in ivs) for ivs in t.intervals]
    own = [(b - a) - busy for a, b, busy in zip(first, last, t.busy)]
    assert own == pytest.approx([idle_per_rank("zb-v", p, 0.5, 1.0, 0.5)] * p, abs=1e-12)
    assert idle_per_rank("zb-v", p, 0.5, 1.5, 0.5) is None        # no closed form off F = I = W
    # the wait for the first input is still there in the makespan: p-1 chunk forwards
    assert t.idle == pytest.approx([(p - 1) * 0.5] * p)
    held = held_in_order(s)
    assert held == [min(p, m)] * p == [first_stage_activations("zb-v", p, m)] * p   # 1F1B's first stage
    assert held == pytest.approx([x / 2 for x in t.peak_activations])            # 2p sets of half a stage


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6), (4, 8), (4, 16), (8, 16)])
def test_dualpipe_v_valid_memory_and_bubble_against_deepseek(p, m):
    s = dualpipe_v(p, m)
    assert validate(s) == [] and validate(with_comms(s)) == []
    assert held_in_order(s) == [p + 0.5] * p == [first_stage_activations("dualpipe-v", p, m)] * p
    assert simulate(s).peak_activations == [2 * p + 1] * p      # DeepSeek-V3 Table 2: PP + 1 chunk sets
    for f, b, w in [(0.5, 1.0, 0.5), (1.0, 1.0, 0.5), (0.5, 1.5, 0.5), (0.5, 0.75, 0.25), (1.5, 1.5, 0.5)]:
        t = simulate(s, forward=f, backward=b - w, weight=w)         # per chunk; B = I + W
        i = b - w
        # the simulation's idle, exactly: ZB-H1's (p-1)(F + I - W) per chunk, plus (p-2)(I - F) when
        # the input gradient is the longer (the inner ranks wait for it); no F&B overlap here
        exact = (p - 1) * (f + i - w) + (p - 2) * max(0.0, i - f)
        assert t.idle == pytest.approx([exact] * p), (f, b, w, t.idle, exact)
        # DeepSeek's (p-1)(F&B + B - 3W) with F&B = F + B (one after the other) is above it by (p-1) I
        # (its F&B assumes a forward and a backward overlapped): a bound, not the value
        bound = idle_per_rank("dualpipe-v", p, f, b, w)
        assert bound - max(t.idle) == pytest.approx((p - 1) * i - (p - 2) * max(0.0, i - f)), (f, b, w)
        # and it beats 1F1B's (p-1)(F+B) with the same per-rank times (a chunk is half a stage)
        assert max(t.idle) < idle_per_rank("1f1b", p, 2 * f, 2 * b, 2 * w)
    with pytest.raises(ValueError, match="at least 2 x stages"):
        dualpipe_v(4, 7)


def test_zb_h1_idle_is_the_papers_formula():
    for f, i, w in [(1, 1, 1), (2, 1, 1), (1, 2, 1), (3, 2, 1), (1, 1, 0.5)]:
        for p in (2, 4, 8):
            t = simulate(build("zb-h1", p, 3 * p), forward=f, backward=i, weight=w)
            assert t.idle == pytest.approx([idle_per_rank("zb-h1", p, f, i + w, w)] * p)
            t = simulate(build("1f1b", p, 3 * p), forward=f, backward=i, weight=w)
            assert t.idle == pytest.approx([idle_per_rank("1f1b", p, f, i + w, w)] * p)


def test_build_by_name_and_broken_v_schedules_are_caught():
    assert build("ZBV", 4, 8).name == "ZB-V" and build("dualpipe_v", 4, 8).layout == "v"
    s = zb_v(4, 8)
    s.actions[3] = [a for a in s.actions[3] if not (a.kind == "F" and a.chunk == 1 and a.mb == 2)]
    assert "stage 3 never runs F2c1" in validate(s)[0]
    s = zb_v(2, 4)
    s.layout = "loop"                      # the same lists on Megatron's layout do not run
    assert validate(s) and "deadlock" in validate(s)[0]


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["zb-v", "dualpipe-v"])
def test_v_schedules_gradients_equal_one_process(cluster, name):
    from labkit.pipeline.executor import run_schedule
    from labkit.pipeline.timeline import timeline_of
    p = cluster.world_size
    s = build(name, p, 2 * p)
    t = timeline_of(cluster.run(run_schedule, s, live=False, warmup=0, timeout=60), s)
    assert t.extra["grad_mismatch"] == [] and t.extra["grad_diff"] < 1e-5
    assert t.extra["sizes"] == [[8 // (2 * p)] * 2] * p                    # 8 layers in 2p parts
    assert [len(ivs) for ivs in t.intervals] == [len(a) for a in s.actions]


def test_comparison_table_simulation_on_the_formulas():
    from labkit.pipeline.compare import compare_schedules
    for f, i, w in [(1, 1, 1), (1, 2, 1)]:
        rows = {r[0]: r for r in compare_schedules(4, 8, f, i, w).rows}
        for name in ("GPipe", "1F1B", "interleaved 1F1B (v=2)", "ZB-H1"):
            assert rows[name][1] == rows[name][2], rows[name]            # idle: simulated = formula
        for name, row in rows.items():
            assert row[5] in (row[6], "-"), row                          # held: counted = formula
        for name, build_name in (("DualPipeV", "dualpipe-v"), ("DualPipe", "dualpipe"), ("ZB-V", "zb-v")):
            s = build(build_name, 4, 8, chunks=2)                         # the row is this simulation
            k = 1.0 if s.layout == "dual" else 0.5
            t = simulate(s, forward=f * k, backward=i * k, weight=w * k)
            assert rows[name][1] == f"{max(t.idle):g}" and rows[name][4] == f"{t.span_bubble:.3f}", rows[name]
        assert float(rows["DualPipeV"][1]) < float(rows["DualPipeV"][2])     # DeepSeek's: a bound
        assert [rows[n][7] for n in ("ZB-V", "DualPipeV", "DualPipe")] == ["1x", "1x", "2x"]
        assert float(rows["DualPipe"][1]) <= float(rows["DualPipe"][2])
    rows = {r[0]: r for r in compare_schedules(4, 8).rows}
    assert rows["ZB-V"][4] == "0.000"                                    # ZB-V, F = I = W: its own span
    assert rows["ZB-V"][2] == f"{idle_per_rank('zb-v', 4, 0.5, 1.0, 0.5):g}" == "0", rows["ZB-V"]


@pytest.mark.parametrize("p,m", [(2, 4), (2, 6), (4, 8), (4, 12), (8, 16)])
def test_same_order_as_torch(p, m):
    """labkit's lists are the order torch's ScheduleZBVZeroBubble and ScheduleDualPipeV compute
    (their per-rank planners called without a process group)."""
    from types import SimpleNamespace
    from torch.distributed.pipelining import schedules as ts
    kinds = {"F": "F", "I": "I", "W": "W", "B": "B", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I",
             "BACKWARD_WEIGHT": "W", "FORWARD": "F"}

    def ours(a, s):
        return (a.kind, a.mb, s.vstage(r, a.chunk))

    def theirs(x):
        subs = x.sub_actions if getattr(x, "sub_actions", None) else [x]
        return [(kinds[str(getattr(y.computation_type, "name", y.computation_type))], y.microbatch_index,
                 y.stage_index) for y in subs]
    if not hasattr(getattr(ts, "ScheduleDualPipeV", None), "_calculate_single_rank_operations"):
        pytest.skip("this torch has no ScheduleDualPipeV planner to compare with")
    for cls, s in ((ts.ScheduleZBVZeroBubble, zb_v(p, m)), (ts.ScheduleDualPipeV, dualpipe_v(p, m))):
        fake = SimpleNamespace(pp_group_size=p, _n_microbatches=m, num_stages=2 * p)
        for r in range(p):
            order = [y for x in cls._calculate_single_rank_operations(fake, r) if x is not None for y in theirs(x)]
            assert [ours(a, s) for a in s.actions[r]] == order, (cls.__name__, r)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16)])
def test_dualpipe_both_ends_valid_memory_and_cut_in_half(p, m):
    s = dualpipe(p, m)                                   # m/2 micro-batches fed at each end
    assert s.microbatches == m // 2 and validate(s) == [] and validate(with_comms(s)) == []
    assert [(s.vstage(r, 0), s.vstage(r, 1)) for r in range(p)] == [(r, p - 1 - r) for r in range(p)]
    assert simulate(s).peak_activations == [p + 1] * p                # DeepSeek-V3 Table 2: PP + 1
    assert [2 * h for h in held_in_order(s)] == [first_stage_activations("dualpipe", p, m)] * p
    for f, i, w in [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 0.5)]:
        t = simulate(s, forward=f, backward=i, weight=w)               # a chunk is a whole stage here
        assert max(t.idle) <= idle_per_rank("dualpipe", p, f, i + w, w) + 1e-9
        if p >= 4:   # cut in half: DualPipeV on p/2 ranks, its chunks a stage of p each, idles as much
            assert t.idle == pytest.approx(simulate(dualpipe_v(p // 2, m // 2), f, i, w).idle[:1] * p)
    with pytest.raises(ValueError, match="even number of stages"):
        dualpipe(3, 6)


def test_dualpipe_is_not_run_by_the_executor():
    from labkit.pipeline.executor import run_schedule
    with pytest.raises(ValueError, match="dualpipe_v"):
        run_schedule(dualpipe(4, 8))
