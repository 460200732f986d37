"""The planner's context (CP) and expert (EP) dimensions: pure arithmetic, no processes."""
import pytest

from labkit.memory import activations
from labkit.nd.layout import Layout
from labkit.plan.shapes import MODELS, Hardware
from labkit.plan.planner import cp_choices, evaluate, plan
from labkit.plan.traffic import step_traffic


def test_cp_traffic_is_the_kv_exchange_and_shortens_every_activation():
    # all-gather attention on N ranks: forward gathers (N-1)/N of K/V, backward reduce-scatters
    # the same bytes of dK/dV; K/V are 2 b h_kv S d values, h_kv split by TP
    b, S, h, a, kv, L, m, N, t = 1, 32768, 1024, 16, 4, 6, 3, 4, 2
    lay = Layout(dp=2, tp=t, cp=N)
    tr = step_traffic(lay, n_params=1e8, layers=L, hidden=h, seq=S, micro_batch=b, micro_batches=m,
                      heads=a, kv_heads=kv, cp_method="allgather")
    kv_bytes = 2 * b * (kv / t) * S * (h // a) * 2
    assert tr.cp == pytest.approx(L * m * 2 * (N - 1) / N * kv_bytes)
    plain = step_traffic(Layout(dp=2, tp=t), n_params=1e8, layers=L, hidden=h, seq=S, micro_batch=b,
                         micro_batches=m)
    assert tr.tp == pytest.approx(plain.tp / N)                   # activations are S / N long
    assert tr.dp / plain.dp == pytest.approx((8 - 1) / 8 / ((2 - 1) / 2))   # grads over CP x DP = 8
    assert [d for d, _ in tr.ranked()][0] in ("tp", "cp", "dp") and tr.calls["cp"] == L * m * 2
    with pytest.raises(ValueError, match="give heads"):
        step_traffic(lay, n_params=1e8, layers=L, hidden=h, seq=S)


def test_ep_traffic_is_four_all_to_alls_and_experts_reduce_over_edp():
    h, k, S, L, E, e = 512, 2, 4096, 4, 8, 4
    lay = Layout(dp=8, ep=e)                                  # EDP = 8 / 4 = 2
    tr = step_traffic(lay, n_params=1e9, layers=L, hidden=h, seq=S, expert_params=0.8e9, top_k=k)
    assert tr.ep == pytest.approx(L * 4 * (e - 1) / e * k * S * h * 2)
    dense, experts = 0.2e9 * 2, 0.8e9 / e * 2
    assert tr.dp == pytest.approx(2 * (7 / 8 * dense + 1 / 2 * experts))
    assert tr.calls["ep"] == 4 * L
    full = step_traffic(lay, n_params=1e9, layers=L, hidden=h, seq=S, expert_params=0.8e9, top_k=k,
                        recompute=True)
    assert full.ep / tr.ep == pytest.approx(1.5)              # recomputed forward: 2 more


def test_cp_memory_is_a_shorter_sequence_and_ep_divides_the_experts():
    m, hw = MODELS["405B-128K"], Hardware(nodes=2048)
    c = evaluate(m, hw, tp=8, pp=1, dp=128, zero_stage=3, checkpointing="full", cp=16)
    act = activations(126, 16384, 128, 131072 // 16, 1, tp=8, sequence_parallel=True,
                      checkpointing="full", vocab=m.vocab)
    assert c.activations == pytest.approx(act.stored + act.recompute + act.output)
    assert cp_choices(m) == [1, 2, 4, 8, 16] and cp_choices(MODELS["405B"]) == [1]
    mx, hw8 = MODELS["Mixtral-8x7B"], Hardware(nodes=8)
    one = evaluate(mx, hw8, 1, 1, 64, zero_stage=1, checkpointing="full")
    four = evaluate(mx, hw8, 1, 1, 64, zero_stage=1, checkpointing="full", ep=4)
    # ZeRO-1 over 64: params + grads 4 B/param stay whole; the experts' 4 B drop to 1/4
    assert one.model_state - four.model_state == pytest.approx(4 * mx.expert_params * 3 / 4, rel=0.02)
    with pytest.raises(ValueError, match="ep 3 must divide the experts"):
        evaluate(mx, hw8, 1, 1, 64, ep=3)


def test_planner_chooses_cp_for_long_context_and_ep_for_deepseek():
    long = plan(MODELS["405B-128K"], Hardware(nodes=2048))
    assert long.cp == 16 and long.tp == 8
    assert "7. CP for long sequences: CP 16: each GPU holds 8,192 of the 131,072 tokens" in str(long)
    assert "without CP nothing fits" in str(long)
    # all-gather attention (Llama 3's), per layer: K/V of 8 heads / TP 8 = 1, head 128, bf16;
    # gathered in forward, again in the recomputed forward, dK/dV reduce-scattered in backward
    c = long.chosen
    assert c.checkpointing == "full"
    assert c.traffic.cp == pytest.approx(126 * c.micro_batches * 3 * 15 / 16 * 2 * 1 * 131072 * 128 * 2)
    short = plan(MODELS["405B"], Hardware(nodes=2048))
    assert short.cp == 1 and "not tried: a sequence of 8,192 tokens" in str(short)
    ds = plan(MODELS["DeepSeek-V3"], Hardware(gpu="H800-80GB", nodes=256))
    assert ds.ep > 1 and ds.chosen.traffic.ep > 0 and "8. EP for experts: EP" in str(ds)
    dense = plan(MODELS["70B"], Hardware(nodes=4))
    assert dense.ep == 1 and "EP for experts" not in str(dense)
    mx = plan(MODELS["Mixtral-8x7B"], Hardware(nodes=8))
    assert "8. EP for experts" in str(mx) and "GB/GPU" in str(mx).split("8. EP for experts")[1]
