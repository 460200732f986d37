"""labkit.pipeline's pure part: formulas, schedules as data, validate, simulate (no processes;
tests/repo/test_layers.py checks that these modules import with torch blocked)."""
import pytest

from labkit.pipeline import (B, F, I, W, as_schedule, bubble_over_ideal, bubble_ratio, build, gpipe,
                             interleaved_1f1b, one_f_one_b, simulate, validate, with_comms, zb_h1)

SHAPES = [(1, 1), (2, 1), (2, 3), (3, 7), (4, 2), (4, 4), (4, 8), (4, 16), (6, 5)]


def test_bubble_ratio_both_conventions():
    assert bubble_ratio(4, 8) == pytest.approx(3 / 11)               # 27 %, idle over total
    assert bubble_over_ideal(4, 8) == pytest.approx(0.375)          # 37.5 %, idle over ideal
    assert bubble_ratio(4, 8, chunks=2) == pytest.approx(3 / 19)
    assert bubble_ratio(1, 5) == 0.0
    r = bubble_ratio(5, 7, 3)
    assert bubble_over_ideal(5, 7, 3) == pytest.approx(r / (1 - r))


@pytest.mark.parametrize("args", [(0, 4), (4, 0), (-1, 4), (4, 8, 0), (2.0, 4), (True, 3), ("4", 8)])
def test_bubble_ratio_bad_arguments(args):
    with pytest.raises(ValueError, match="whole number"):
        bubble_ratio(*args)


@pytest.mark.parametrize("p,m", SHAPES)
@pytest.mark.parametrize("make", [gpipe, one_f_one_b, zb_h1])
def test_builtin_schedules_valid_and_match_formula(make, p, m):
    s = make(p, m)
    assert validate(s) == []
    assert validate(with_comms(s)) == []
    t = simulate(s, forward=1, backward=1, weight=1)
    if make is zb_h1:                 # Qi et al. 2024: bubble (p-1)(F+I-W) on each stage
        assert t.makespan == pytest.approx(3 * m + (p - 1) * (1 + 1 - 1)) if m >= p else True
        assert t.bubble <= simulate(one_f_one_b(p, m)).bubble + 1e-12
    else:
        assert t.bubble == pytest.approx(bubble_ratio(p, m))


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 8, 3), (3, 9, 4)])
def test_interleaved_matches_formula(p, m, v):
    s = interleaved_1f1b(p, m, v)
    assert validate(s) == [] and validate(with_comms(s)) == []
    t = simulate(s, forward=1 / v, backward=1 / v, weight=1 / v)
    assert t.bubble == pytest.approx(bubble_ratio(p, m, v))


def test_interleaved_needs_multiple_of_p():
    with pytest.raises(ValueError, match="multiple of stages"):
        interleaved_1f1b(4, 6, 2)


@pytest.mark.parametrize("m", [4, 8, 16])
def test_1f1b_keeps_at_most_p_in_flight_gpipe_keeps_m(m):
    p = 4
    assert simulate(gpipe(p, m)).peak_activations == [m] * p
    assert simulate(one_f_one_b(p, m)).peak_activations == [min(p - r, m) for r in range(p)]


def test_unequal_stage_bubble_and_send_time():
    slow = simulate(one_f_one_b(4, 8), forward=[1, 1, 2, 1], backward=[1, 1, 2, 1], weight=[1, 1, 2, 1])
    assert slow.bubble > bubble_ratio(4, 8) + 0.1         # one slow stage paces the whole pipeline
    # GPipe: the fill and the drain each cross p-1 links; 1F1B's steady state also waits on
    # each round trip, so it pays more for slow sends
    assert simulate(gpipe(4, 8), send=0.5).makespan == pytest.approx(33 + 2 * 3 * 0.5)
    assert simulate(one_f_one_b(4, 8), send=0.5).makespan > 33 + 2 * 3 * 0.5


def test_build_by_name():
    assert build("1F1B", 2, 3).actions == one_f_one_b(2, 3).actions
    assert build("zb_h1", 2, 3).name == "ZB-H1"
    with pytest.raises(ValueError, match="unknown schedule"):
        build("chimera", 2, 2)


# --- validate: the problems a hand-written schedule has -------------------------------------
def test_blocking_sends_deadlock_1f1b_but_isend_does_not():
    s = with_comms(one_f_one_b(2, 3))
    assert validate(s) == []
    (msg,) = validate(s, blocking_sends=True)
    assert msg.startswith("deadlock: 2 stages")
    assert "SEND_F1" in msg and "SEND_B0" in msg and "batch_isend_irecv" in msg
    assert validate(with_comms(gpipe(2, 3)), blocking_sends=True) == []


def test_deadlock_names_who_waits_for_what():
    acts = [list(a) for a in one_f_one_b(4, 4).actions]
    acts[0] = [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)]     # no warm-up on stage 0
    (msg,) = validate(acts)
    assert "stage 0 waits at step 1 (B0) for B0 on stage 1; stage 1 is itself stuck at step 1 (F1)" in msg


@pytest.mark.parametrize("acts,m,expect", [
    ([[F(0), F(1), B(0), B(1)], [F(0), B(0), F(1)]], 2, "stage 1 never runs B1"),
    ([["F0", "F1", "B1", "B0"], ["B0", "F0", "F1", "B1"]], 2, "stage 1 runs B0 (step 0) before F0 (step 1)"),
    ([[F(0), F(0), B(0)], [F(0), B(0)]], 1, "stage 0 runs F0 (forward of micro-batch 0) twice"),
    ([[F(0), B(0)]], 1, "1 action lists for 2 stages"),
    ([[F(0), I(0), W(0)], [F(0), I(0)]], 1, "stage 1 never runs W0"),
    ([[F(0), W(0), I(0)], [F(0), B(0)]], 1, "stage 0 runs W0 (step 1) before I0 (step 2)"),
    ([[F(0), B(0), I(0), W(0)], [F(0), B(0)]], 1, "both B0 and its halves"),
    ([["F0", "X1"], ["F0", "B0"]], 1, "'X1' is not an action"),
    ([[F(0), F(5), B(0)], [F(0), B(0)]], 1, "out of range"),
])
def test_validate_structural_problems(acts, m, expect):
    problems = validate(acts) if expect.startswith("'X1'") else validate(as_schedule(acts, 2, m))
    assert problems and expect in problems[0], problems


def test_explicit_comms_missing_receive():
    s = with_comms(one_f_one_b(2, 2))
    s.actions[1] = [a for a in s.actions[1] if repr(a) != "RECV_F1"]
    assert "stage 1 never runs RECV_F1" in validate(s)[0]


# --- activations held: same bubble, different memory ----------------------------------------
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 8)])
def test_activations_held_per_schedule_against_the_formulas(p, m):
    from labkit.pipeline import first_stage_activations, held_in_order, interleaved_memory_factor
    assert held_in_order(gpipe(p, m)) == [m] * p
    assert held_in_order(one_f_one_b(p, m)) == [p - r for r in range(p)]
    assert held_in_order(zb_h1(p, m)) == [p] * p           # rank r holds back r W's
    for v in (2, 3):
        held = held_in_order(interleaved_1f1b(p, m, v))
        # warm-up (v-1)p + 2(p-1-r) chunk forwards, one more before the first backward
        # (never more than all m micro-batches)
        assert held == pytest.approx([min(((v - 1) * p + 2 * (p - 1 - r) + 1) / v, m) for r in range(p)])
        assert held[0] == pytest.approx(min(p * interleaved_memory_factor(p, v), m))   # Korthikanti
        assert held[0] == pytest.approx(first_stage_activations("interleaved", p, m, v))
    assert held_in_order(interleaved_1f1b(4, 8, 2))[0] == 5.5 and interleaved_memory_factor(4, 2) == 1.375
    for make in (gpipe, one_f_one_b, zb_h1):                 # the counting agrees with the simulation
        s = make(p, m)
        assert held_in_order(s) == simulate(s).peak_activations
        assert held_in_order(s)[0] == first_stage_activations(s.name, p, m)
