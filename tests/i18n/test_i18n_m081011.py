"""What labkit prints for notebooks 08, 10 and 11, in Chinese (pure: no cluster, no process).

Each test sets LABKIT_LANG=zh, makes a wrong or plain case print through the library, and
asserts the Chinese text with the same numbers as the English; the words programs read (FAIL,
ok:, checker names) stay English.
"""
import pytest


# -- notebook 08: the grid and the planner --------------------------------------------------
def test_invalid_layout_is_explained_in_chinese_with_its_numbers(zh):
    from labkit.nd.layout import validate
    with pytest.raises(ValueError) as err:
        validate(dp=3, pp=3, tp=16, world_size=128, gpus_per_node=8, layers=80, heads=60)
    text = str(err.value)
    assert text.startswith("并行布局无效：")
    assert "dp(3) × pp(3) × tp(16) = 144 != world size（128）；各维并行度的乘积必须等于卡数" in text
    assert "层数（80）不能被 pp(3) 整除：80 / 3 = 每个 stage 26.67 层" in text
    assert "注意力头数（60）不能被 tp(16) 整除：60 / 16 = 每个 rank 3.75 个头" in text


def test_layout_and_plan_print_in_chinese(zh):
    from labkit.nd.layout import Layout
    from labkit.plan import plan, ranking_sentence, step_traffic
    from labkit.plan.shapes import MODELS, Hardware
    lay = Layout(dp=2, pp=2, tp=8, gpus_per_node=8)
    assert str(lay).splitlines()[0] == \
        "32 卡 = dp 2 × pp 2 × tp 8，分布在 4 个节点上（每节点 8 卡）；顺序 tp-pp-dp（变化最快的在前）"
    assert "  pp：16 组，每组 2 个，例如 [0, 8]（跨节点）" in str(lay)
    p = str(plan(MODELS["70B"], Hardware(nodes=4)))
    assert "  1. 单卡装得下吗：模型状态 1104 GB（每参数 16 B，混合精度 Adam）" in p
    assert "  => TP 4 × PP 2 × DP 4（ZeRO-2），梯度检查点 选择性，micro-batch 1：每卡 70.4 GB" in p
    assert "流水线气泡 0.4%" in p
    tr = step_traffic(Layout(dp=4, pp=1, tp=8, gpus_per_node=8), n_params=7e10, layers=80,
                      hidden=8192, seq=4096, micro_batches=64, zero_stage=1)
    assert ranking_sentence(tr) == ("按每卡字节数 TP > DP > PP；讲义的 TP > PP > DP 在这里不成立"
                                    "（按每 step 的调用次数，DP 仍然最少）")


def test_planner_form_labels_in_chinese(zh):
    from labkit.plan.form import render
    from labkit.plan.shapes import MODELS, Hardware
    page = render(MODELS["70B"], Hardware(nodes=4))
    assert "<th>分支</th><th>理由</th>" in page and ">每卡显存<" in page
    assert "70.4 GB（模型状态 47.4，激活值 23.0，收集来的层 0.0），共 80" in page
    # the checkpointing mode the plan chose, shown in Chinese (the Candidate keeps "selective")
    assert "<td style='text-align:left'>梯度检查点</td><td style='text-align:left'>选择性</td>" in page
    assert "<td style='text-align:left'>3. 梯度检查点</td><td style='text-align:left'>选择性：" in page
    assert not [w for w in ("branch", "reason", "memory / GPU", "activations") if f">{w}<" in page]


# -- notebook 10: the diagnosis order ------------------------------------------------------
def test_diagnosis_of_a_communication_bound_run_in_chinese(zh):
    from labkit.throughput import Phases, diagnose, report
    ranks = [Phases(data=0.001, forward=0.001, backward=0.001, wait=0.02, comm=0.08, optimizer=0.001)]
    text = report(diagnose(ranks, peak_bytes=7.6 * 2**20, budget_bytes=16 * 2**20), "== communication")
    lines = text.splitlines()
    assert lines[1] == ("1. [!!] 利用率（step 中计算所占的比例）：3% 在计算（低于 60% 算低）；"
                        "其余时间主要在通信（数据 1%，等其他 rank 19%，通信 77%）")
    assert lines[2].startswith("2. [!!] 通信占比：占 step 的 77%（讲义：超过 30% 就要减少通信")
    assert lines[3].startswith("3. [ok] 显存峰值与预算之比：峰值 7.6 MiB / 16.0 MiB = 48%")
    assert lines[-1] == "瓶颈：通信"


def test_knob_table_in_chinese_keeps_the_knob_names(zh):
    from labkit.throughput import knob_table
    table = knob_table()
    assert table.splitlines()[0] == "| 参数 | 讲义 | 用什么换什么 | 课程在哪里测量它 |"
    assert "| `bucket_cap_mb` | DDP 梯度分桶大小（默认 25） |" in table


# -- notebook 11: the pitfalls --------------------------------------------------------------
def test_pitfall_diagnoses_in_chinese_with_their_numbers(zh):
    from labkit import pitfalls as P
    assert P.devices_distinct({0: "cuda:0", 1: "cuda:0", 2: "cuda:0"}) == (
        False, "rank 0, 1, 2 都在用 cuda:0：请在创建张量或进程组之前调用 torch.cuda.set_device(local_rank)")
    ok, why = P.validation_shards([[0, 1, 2], [3, 0, 1]], 5, again=[[1, 0, 2], [3, 0, 1]])
    assert not ok and why == ("2 个样本被评估了两次（填充：[0, 1]）；请把填充的位置遮掉，drop_last 只在训练时用；"
                              "1 个样本从未被评估（[4]）；每次评估的顺序都不同：验证时请用 shuffle=False")
    assert P.lr_rule(0.1, 0.1, 32, 256)[1] == ("全局 batch 是基准的 8 倍（32 -> 256），lr 0.1 却没有缩放："
                                               "训练会很慢；linear 规则 0.8，sqrt 规则 0.282843")
    assert P.seeds_ok([1, 2], [0, 0], [5, 6])[1].startswith("各 rank 的初始权重不一致（2 个版本）")
    assert P.pipeline_balance([1, 1, 5, 1])[1].startswith("stage 2 耗时是各 stage 平均的 2.50 倍；其他 stage 有 60%")


# -- notebook 01 leftovers: the fit verdict ---------------------------------------------------
def test_fit_verdict_in_chinese(zh):
    import importlib
    A = importlib.import_module("labkit.memory.activations")
    assert str(A.fits(140e9, 0, 80)) == ("装不下：需要 140.0 GB（模型状态 140.0 + 激活值 0.0），"
                                         "比一张 80 GB 的卡多 60.0 GB（是其显存的 1.75 倍）")


# -- notebooks 03, 04 leftovers: errors raised on a rank (a one-rank gloo group in this process,
#    so that no cluster starts) --------------------------------------------------------------
def test_errors_raised_on_a_rank_in_chinese(zh):
    import torch
    import torch.distributed as dist
    import labkit
    from labkit.ddp.parity import train_parity
    from labkit.toy_models import AwkwardNet
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        _, opt = labkit.zero.wrap(AwkwardNet(), torch.optim.Adam, stage=1, lr=1e-3)
        with pytest.raises(RuntimeError) as step:
            opt.step()
        with pytest.raises(RuntimeError) as unused:
            train_parity("bucketed", with_unused=True, steps=1)
    finally:
        dist.destroy_process_group()
    assert str(step.value).startswith("rank 0：自上次 zero_grad() 以来还没有调用过 loss.backward()，"
                                      "就调用了 optimizer.step()：没有可以规约的梯度。")
    assert str(unused.value).startswith("rank 0 上的 BucketedDDP：这次反向中 'unused'（5 个元素）没有收到梯度")
