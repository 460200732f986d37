"""The checkers and library text of notebooks 07, 09, 12 and 13 in Chinese (LABKIT_LANG=zh).

Plausible wrong answers from each checker's own corpus get their diagnosis in Chinese with the
same numbers as in English, while the words programs read (`FAIL`, the checker's name) stay
English. Pure paths only: no cluster starts here (the checkers fail before they would run
anything on ranks, or the diagnosis is a pure function).
"""
import pathlib
import sys
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "check"))


NO_CLUSTER = types.SimpleNamespace(world_size=4)   # never used: these answers fail before any run


# -- notebook 07: schedule_1f1b -----------------------------------------------------------------

def test_pipeline_diagnoses_in_chinese(zh):
    from test_pipeline_check import backward_first, gpipe_order, no_cooldown, no_warmup, warmup_reversed
    from labkit.check.pipeline import judge_1f1b
    expect = {
        no_warmup: "p=4, m=8：能跑通，但模拟出的气泡比例是 75.0%，而 1F1B 的是 (p-1)/(m+p-1) = 27.3%",
        gpipe_order: "stage 0 同时保留了 8 个 micro-batch 的激活值；1F1B 最多保留 p - r = 4 个",
        no_cooldown: "p=4, m=8：stage 0 从来没有执行 B5（micro-batch 5 的反向）",
        backward_first: "stage 3 先执行 B0（第 0 步），后执行 F0（第 1 步）：反向需要它自己那次前向的激活值",
        warmup_reversed: "死锁：4 个 stage 永远无法推进：stage 0 在第 1 步（B0）等待 stage 1 上的 B0",
    }
    for fn, want in expect.items():
        ok, detail = judge_1f1b(fn)
        assert not ok and want in detail, (fn.__name__, detail)


def test_pipeline_verdict_words_stay_english(zh, capsys):
    from test_pipeline_check import no_warmup
    from labkit.check.pipeline import schedule_1f1b
    assert not schedule_1f1b(no_warmup, cluster=NO_CLUSTER)
    out = capsys.readouterr().out
    assert out.startswith("schedule_1f1b: FAIL (p=4, m=8：能跑通，但模拟出的气泡比例是 75.0%"), out


def test_pipeline_validation_and_table_in_chinese(zh):
    from labkit.pipeline import F, B, validate
    from labkit.pipeline.compare import compare_schedules
    got = validate([[F(0), B(0)], [B(0), F(0)]])
    assert got == ["stage 1 先执行 B0（第 0 步），后执行 F0（第 1 步）：反向需要它自己那次前向的激活值"], got
    t = compare_schedules(4, 8)
    assert t.header[1] == "每个 rank 的空闲时间，模拟" and t.title.startswith("p=4 个 rank，m=8 个 micro-batch"), t


# -- notebook 09: accumulate_gradients ----------------------------------------------------------

def _grads_case(**scale):
    """got and the candidates of check.tricks._verdict: one tensor per name, `got` a multiple of
    the right gradient (what the mistakes produce)."""
    import torch
    right = {"w": torch.tensor([1.0, -2.0, 3.0]), "frozen": None}
    names = ("right", "local", "sum", "mean_twice", "undivided", "twice", "last", "last_whole",
             "first", "first_whole")
    cands = {n: {"w": right["w"] * (i + 1) * 10, "frozen": None} for i, n in enumerate(names)}
    cands["right"] = right
    return cands


def _watch(forwards=3):
    """What labkit.check.tricks_watch.Watch records of a loop over 6 sequences in `forwards` pieces,
    each forward's backward right after it, one micro-batch's saved bytes."""
    import types
    import torch
    from labkit.check.tricks_watch import Watch
    x = torch.arange(36).view(6, 6)
    w = types.SimpleNamespace(x=x, forwards=list(x.chunk(forwards)), peak=100, reduces=[],
                              events=[e for k in range(forwards) for e in (("F", k), ("B", k))])
    w.rows = lambda: Watch.rows(w)
    return w


def test_accumulation_diagnoses_in_chinese(zh):
    from labkit.check.tricks import _accumulated, _verdict
    cands = _grads_case()
    cases = {
        "sum": "rank 1：你的梯度正好是均值的 4 倍，也就是各 rank 的和：all-reduce 之后还要除以 world size（4）",
        "undivided": "rank 1：你的梯度正好是大 batch 梯度的 3 倍，因为每个 micro-batch 的 loss 没有做除法",
        "last": "rank 1：.grad 里只剩下最后一个 micro-batch 的梯度：循环里的 zero_grad()",
    }
    for name, want in cases.items():
        got = _verdict(cands[name], cands, False, 3, 4, 1, 100, 100)
        assert got.startswith(want), (name, got)
    assert _verdict(cands["right"], cands, False, 3, 4, 1, 300, 100) is None    # traffic: _accumulated
    got = _accumulated(_watch(), _watch(), 3, 1, 300, 100)
    assert got.startswith("梯度是对的，但 rank 1 发送的字节数是每个梯度做一次 all-reduce 的 3.00 倍"), got
    whole = _watch(forwards=1)
    got = _accumulated(whole, _watch(), 3, 1, 100, 100)
    assert got.startswith("rank 1：梯度是对的，但它来自在整个 6 条序列的本地 batch 上的一次前向和反向"), got
    got = _verdict(cands["right"], cands, True, 3, 4, 0, 100, 100)
    assert got.startswith("rank 0：你的函数改动了权重"), got


def test_tricks_table_and_sentence_in_chinese(zh):
    from labkit.tricks.formulas import Config
    from labkit.tricks.compare import _place
    c = Config(precision="mixed", checkpointing="full")
    assert c.describe() == "mixed precision (bf16 + fp32 masters) + full checkpointing"   # code cells' prints
    assert c.describe(local=True) == "混合精度（bf16 + FP32 主权重） + 完整梯度检查点"
    assert _place(["A", "C", "M", "8"], "M", 4.88) == "4 项中第 3，step 耗时 4.88 倍"


def test_tricks_conclusion_in_chinese(zh):
    from labkit.tricks import compare
    from labkit.tricks.formulas import combinations
    by_code = {c.code: c for c in combinations()}
    mb = {"-": 20, "A": 12, "C": 13.6, "M": 15.6, "8": 17.1}      # peak per rank, MB: notebook 09's order
    results = [compare.Result(by_code[c], [{"peak": types.SimpleNamespace(device=v * 1e6)}]) for c, v in mb.items()]
    text = compare.conclusion(results)
    assert text == ("在这个模型上实测，按每个 rank 省下的显存从多到少：1. 梯度累积（8.00 MB），2. 完整梯度检查点"
                    "（6.40 MB），3. 混合精度（bf16 + FP32 主权重）（4.40 MB），4. 8-bit Adam（2.90 MB）。"
                    "讲义中这 4 项的顺序是：混合精度（bf16 + FP32 主权重），完整梯度检查点，梯度累积，8-bit Adam"
                    "；完整梯度检查点、8-bit Adam 的位置相同。"), text


# -- notebook 12: online_softmax_merge ----------------------------------------------------------

def test_merge_diagnoses_in_chinese(zh, capsys):
    from check_corpus import merge
    from labkit.check.cp import online_softmax_merge
    wrong = {name: fn for name, fn, _, _ in merge.WRONG}
    expect = {
        "no rescale": "online_softmax_merge: FAIL (在“同一个 softmax 的两半”上：o_a + o_b：每个部分输出都是按它自己那个块的和归一化的",
        "lse = max": "online_softmax_merge: FAIL (o 是对的，但 lse = max(lse_a, lse_b) 漏掉了较小那个块的和",
        "max not subtracted": "online_softmax_merge: FAIL (在“分数接近 120（exp 会让 fp32 溢出）”上：把两个 log-sum-exp 一起平移到 0 附近就对了",
        "naive wrapped in nan_to_num": "online_softmax_merge: FAIL (在“分数接近 120（exp 会让 fp32 溢出）”上：把两个 log-sum-exp 一起平移到 0 附近就对了",
        "textbook logaddexp: nan when both blocks are masked":
            "online_softmax_merge: FAIL (在“一个两个块里都看不到任何 key 的 query（lse_a = lse_b = -inf）”上：结果里有 inf 或 nan：这样的行 lse 也是 -inf",
        "first block only": "online_softmax_merge: FAIL (在“同一个 softmax 的两半”上：o 与在两个块上一起做 softmax 的结果最多相差 ",
    }
    for name, want in expect.items():
        assert not online_softmax_merge(wrong[name], cluster=NO_CLUSTER)
        out = capsys.readouterr().out
        assert out.startswith(want), (name, out)


# -- notebook 13: ep_dispatch -------------------------------------------------------------------

def _moe_case(out_of):
    """A rank's result as check.moe.diagnose reads it: 2 ranks, 4 experts, 5 rows; `out_of`
    makes the learner's output from the right one and the gates."""
    import torch
    g = torch.Generator().manual_seed(1)
    e = torch.tensor([0, 0, 1, 2, 3])
    gate = 0.2 + 0.8 * torch.rand(5, generator=g, dtype=torch.float64)
    every = torch.randn(4, 5, 6, generator=g, dtype=torch.float64)
    want = gate[:, None] * every[e, torch.arange(5)]
    return {"rank": 1, "n": 2, "e": e, "g": gate, "every": every, "out": out_of(want, gate[:, None])}


def test_dispatch_diagnoses_in_chinese(zh):
    from labkit.check.moe import diagnose
    cases = {
        "rank 1：门控权重乘了两次（gate^2 x expert(row)）": lambda w, g: w * g,
        "rank 1：缺少门控权重：每一行回来时都是 expert(row)": lambda w, g: w / g,
        "rank 1：返回的是 (5, 3)，应为形状 (5, 6) 的张量": lambda w, g: w[:, :3],
    }
    for want, out_of in cases.items():
        got = diagnose(_moe_case(out_of))
        assert got.startswith(want), got


def test_words_looked_up_through_a_table_have_their_chinese():
    """Messages that reach tr()/tr_fig() through a dict, not as literals (test_i18n cannot see
    them): every one has its Chinese."""
    from labkit.i18n.messages import messages
    MESSAGES = messages("zh")
    from labkit.pipeline.plots import LABELS
    from labkit.pipeline.schedules import NAMES
    from labkit.tricks.formulas import WORDS
    from labkit.tricks.plots import SHORT
    from labkit.check.cp import _LSE_MISTAKES
    words = [*LABELS.values(), *NAMES.values(), *WORDS.values(), *SHORT.values(),
             *(why for _, why in _LSE_MISTAKES.values()), "baseline (fp32, nothing saved)", "interleaved 1F1B"]
    missing = [w for w in words if w not in MESSAGES]
    assert not missing, missing
