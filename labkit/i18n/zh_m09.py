"""Chinese catalog: notebook 09 (memory tricks): accumulate_gradients' diagnoses, the tricks'
words, tables and sentences, LossScaler's errors and the figures. Merged by labkit.i18n.zh (PARTS)."""

MESSAGES = {
    # -- notebook 09: checker accumulate_gradients (labkit/check/tricks.py) -------------------
    "rank {r}: your function raised {kind} ({message}) because {name!r} is frozen "
    "(requires_grad=False), so its .grad is None: skip parameters whose .grad is None":
        "rank {r}：你的函数抛出了 {kind}（{message}），因为 {name!r} 被冻结了（requires_grad=False），"
        "它的 .grad 是 None：跳过 .grad 为 None 的参数",
    "rank {r}: your function changed the weights: leave the update to the optimizer "
    "(no optimizer.step() inside the accumulation loop)":
        "rank {r}：你的函数改动了权重：更新留给优化器去做（梯度累积的循环里不要调用 optimizer.step()）",
    "rank {r}: {k!r} is frozen and has no gradient, but your function gave it one: "
    "skip parameters whose .grad is None":
        "rank {r}：{k!r} 被冻结了，本来没有梯度，你的函数却给了它一个：跳过 .grad 为 None 的参数",
    "right gradients, but rank {r} sent {ratio:.1f}x the bytes of one all-reduce per "
    "parameter: all-reduce once, after the last of the {micro} micro-batches (not after "
    "every one)":
        "梯度是对的，但 rank {r} 发送的字节数是每个参数做一次 all-reduce 的 {ratio:.1f} 倍："
        "只在 {micro} 个 micro-batch 中的最后一个之后做一次 all-reduce（不要每个 micro-batch 之后都做）",
    "your gradients are this rank's own: they were not averaged over the ranks "
    "(after the last micro-batch, all-reduce each .grad, then divide by the world size {n})":
        "你的梯度只是这个 rank 自己的：没有在各 rank 之间平均（在最后一个 micro-batch 之后，"
        "对每个 .grad 做 all-reduce，再除以 world size {n}）",
    "your gradients are exactly {n} x the mean, the sum over ranks: divide by the "
    "world size ({n}) after the all-reduce":
        "你的梯度正好是均值的 {n} 倍，也就是各 rank 的和：all-reduce 之后还要除以 world size（{n}）",
    "your gradients are 1/{n} of the mean: they were averaged over the {n} "
    "ranks twice (ReduceOp.AVG already divides by the world size; do not "
    "divide again)":
        "你的梯度是均值的 1/{n}：在 {n} 个 rank 上平均了两次（ReduceOp.AVG 已经除以 world size，不要再除一次）",
    "your gradients are exactly {micro} x the big-batch gradient, because each "
    "micro-batch's loss was not divided: divide each micro-batch's loss by the "
    "number of micro-batches ({micro}) before backward":
        "你的梯度正好是大 batch 梯度的 {micro} 倍，因为每个 micro-batch 的 loss 没有做除法："
        "在 backward 之前，把每个 micro-batch 的 loss 除以 micro-batch 的个数（{micro}）",
    "your gradients are the big-batch gradient divided by {micro} once more: "
    "divide each micro-batch's loss by the number of micro-batches once":
        "你的梯度是大 batch 梯度又除了一次 {micro}：每个 micro-batch 的 loss 只需除以 micro-batch 的个数一次",
    "only the last micro-batch's gradient is left in .grad: zero_grad() (or .grad = "
    "None) inside the loop throws the earlier ones away; let backward() add them "
    "up in .grad":
        ".grad 里只剩下最后一个 micro-batch 的梯度：循环里的 zero_grad()（或 .grad = None）"
        "把前面的梯度都丢掉了；让 backward() 在 .grad 里把它们累加起来",
    "only the last micro-batch's gradient is left in .grad, and its loss was "
    "not divided: do not zero the gradients inside the loop, and divide each "
    "loss by the number of micro-batches ({micro})":
        ".grad 里只剩下最后一个 micro-batch 的梯度，而且它的 loss 没有做除法："
        "不要在循环里清零梯度，并把每个 loss 除以 micro-batch 的个数（{micro}）",
    "only the first micro-batch counted: run forward and backward on every "
    "micro-batch":
        "只有第一个 micro-batch 被算进去了：每个 micro-batch 都要做前向和反向",
    "only the first micro-batch counted: run forward and backward on every "
    "micro-batch, each loss divided by the number of micro-batches":
        "只有第一个 micro-batch 被算进去了：每个 micro-batch 都要做前向和反向，每个 loss 都除以 micro-batch 的个数",
    "rank {r}: {why}": "rank {r}：{why}",
    "rank {r}: {name!r} has no gradient (.grad is None) after your function: run "
    "backward on every micro-batch and leave the gradients in .grad":
        "rank {r}：你的函数执行完后 {name!r} 没有梯度（.grad 是 None）：每个 micro-batch 都要做 backward，"
        "并把梯度留在 .grad 里",
    "rank {r}: the gradient of {k!r} differs from one process's gradient on the global "
    "batch by up to {err:.3g}":
        "rank {r}：{k!r} 的梯度与单进程在全局 batch 上的梯度最多相差 {err:.3g}",
    "{n} ranks x {micro} micro-batches: every gradient equals one process's on the "
    "global batch (rtol {rtol:g}), with a tied and a frozen parameter, and no more "
    "traffic than one all-reduce of the gradients":
        "{n} 个 rank x {micro} 个 micro-batch：每个梯度都等于单进程在全局 batch 上的梯度（rtol {rtol:g}），"
        "包括一个共享权重和一个冻结参数，通信量也不超过对梯度做一次 all-reduce",

    # -- notebook 09: the tricks in words, tables and sentences (labkit/tricks/formulas.py,
    #    compare.py, loss_scale.py) ----------------------------------------------------------
    "mixed precision (bf16 + fp32 masters)": "混合精度（bf16 + FP32 主权重）",
    "bf16 autocast": "bf16 autocast",
    "fp16 mixed precision (fp32 masters, loss scaled)": "fp16 混合精度（FP32 主权重，损失缩放）",
    "full checkpointing": "完整梯度检查点",
    "selective checkpointing (attention core)": "选择性梯度检查点（注意力核心）",
    "gradient accumulation": "梯度累积",
    "8-bit Adam": "8-bit Adam",
    "optimizer offload": "优化器卸载",
    "ZeRO-1 (optimizer state sharded)": "ZeRO-1（优化器状态分片）",
    "baseline (fp32, nothing saved)": "基线（fp32，不做任何节省）",
    "TinyGPT, {n} ranks, batch {batch} x {seq} per rank": "TinyGPT，{n} 个 rank，每个 rank 的 batch 为 {batch} x {seq}",
    "code": "代号",
    "tricks": "手段",
    "peak per rank on the device (MB)": "每个 rank 的设备显存峰值 (MB)",
    "vs baseline": "相对基线",
    "stored activations: measured / formula (MB)": "保存的激活值：实测 / 公式 (MB)",
    "step (ms): median (fastest-slowest), slowest rank": "step 耗时 (ms)：中位数（最快-最慢），最慢的 rank",
    "peak vs baseline": "峰值相对基线",
    "step vs baseline": "step 耗时相对基线",
    "{i}. {trick} ({mb:,.2f} MB)": "{i}. {trick}（{mb:,.2f} MB）",
    "Measured on this model, most memory saved per rank first: {listed}.":
        "在这个模型上实测，按每个 rank 省下的显存从多到少：{listed}。",
    " That is the notes' order.": "这正是讲义给出的顺序。",
    " The notes' order of these {n} is: {order}": "讲义中这 {n} 项的顺序是：{order}",
    "; no trick keeps its place.": "；没有一项的位置相同。",
    "; {tricks} keeps its place.": "；{tricks} 的位置相同。",
    "; {tricks} keep their place.": "；{tricks} 的位置相同。",
    " and ": "和",
    "notes' rank": "讲义中的名次",
    "the notes": "讲义",
    "measured as": "实测对应的手段",
    "saved per rank": "每个 rank 省下的显存",
    "measured rank by memory saved": "按省下显存的实测名次",
    "not measured here": "这里没有测量",
    "(not in the list)": "（不在清单中）",
    "the notes' priority list against the measurements": "讲义的优先级清单与实测对照",
    "{k} of {n}": "{n} 项中第 {k}",
    ", step {ratio:.2f}x": "，step 耗时 {ratio:.2f} 倍",
    "these gradients are fp16: dividing them by the scale in fp16 would "
    "underflow the small ones to zero again. Keep fp32 masters (labkit.zero."
    "masters.MasterOptimizer) or fp32 parameters under "
    "torch.autocast(dtype=torch.float16)":
        "这些梯度是 fp16 的：在 fp16 里除以缩放因子，会让小的梯度再次下溢为零。请保留 FP32 主权重"
        "（labkit.zero.masters.MasterOptimizer），或在 torch.autocast(dtype=torch.float16) 下使用 fp32 参数",
    "unscale_() was already called since the last update(): call step() then update()":
        "自上次 update() 以来已经调用过 unscale_()：请先调用 step()，再调用 update()",
    "update() before step(): nothing was checked this iteration":
        "在 step() 之前调用了 update()：这一轮还没有检查过任何梯度",

    # -- notebook 09: figures (labkit/tricks/plots.py, fp16_plots.py) --------------------------
    "mixed precision": "混合精度",
    "selective checkpointing": "选择性梯度检查点",
    "accumulation": "梯度累积",
    "offload": "卸载",
    "ZeRO-1": "ZeRO-1",
    "{n} tricks": "{n} 种手段",
    "{n} trick": "{n} 种手段",
    "baseline": "基线",
    "step time on the slowest rank (ms: median, bar from fastest to slowest step)":
        "最慢的 rank 上的 step 耗时（ms：中位数，误差条从最快到最慢的 step）",
    "step time on the slowest rank (ms)": "最慢的 rank 上的 step 耗时 (ms)",
    "peak per rank (MB)": "每个 rank 的峰值 (MB)",
    "memory against time (lower left is better)": "显存与时间（越靠左下越好）",
    "combined": "组合的手段数",
    "measured so far: {done} of {total} configurations": "已测量：{done} / {total} 种配置",
    "training loss": "训练 loss",
    "fp32 Adam against 8-bit Adam": "fp32 Adam 与 8-bit Adam 对比",
    "{lo:.0e} to {hi:.0e}, about {digits:.1f} digits": "{lo:.0e} 到 {hi:.0e}，约 {digits:.1f} 位有效数字",
    "range of each format (light: subnormals, fewer digits; dark: normal numbers)":
        "各格式的取值范围（浅色：次正规数，有效数字更少；深色：正规数）",
    "{label} ({k:,} nonzero values)": "{label}（{k:,} 个非零值）",
    "fp16's smallest (2^-24) ": "fp16 的最小值 (2^-24) ",
    " fp16's largest": " fp16 的最大值",
    "elements": "元素个数",
    "|gradient| measured in fp32: what lies left of fp16's smallest becomes 0 in fp16":
        "在 fp32 中测得的 |梯度|：位于 fp16 最小值左边的，在 fp16 中都会变成 0",
    "log2 of the magnitude": "数值大小的 log2",
    "loss": "loss",
    "loss (x: a step skipped for an inf)": "loss（x：因出现 inf 而跳过的 step）",
    "elements exactly 0 in fp16, nonzero in fp32": "在 fp16 中恰为 0、在 fp32 中非零的元素个数",
    "gradient elements underflowed to 0 (of {n})": "下溢为零的梯度元素（共 {n} 个）",

    # -- notebook 09: gradient accumulation's argument (labkit/tricks/accumulation.py) ----------
    "the batch of {n} does not split into {micro} equal micro-batches":
        "大小为 {n} 的 batch 无法均分成 {micro} 个相同大小的 micro-batch",

    # -- notebook 09: accumulate_gradients, how the gradients were made (issue 33) --
    "rank {r}: right on the {n} ranks of the first case, but on a world of size {k} the gradient of {name!r} differs from one process's on those ranks' batch by up to {err:.3g}: average over every rank of the world (dist.all_reduce), not over a partner":
        'rank {r}：第一种情形的 {n} 个 rank 上是对的，但在大小为 {k} 的 world 上，{name!r} 的梯度与单进程在这些 rank 的 batch 上的梯度最多相差 {err:.3g}：要在 world 的所有 rank 上求平均（dist.all_reduce），而不是只和一个搭档求平均',
    'in the second case, on a world of size {k}: your function must work for any world size (is a partner rank or the number 2 written in it?)':
        '这是第二种情形，world 的大小为 {k}：你的函数必须对任意 world 大小都成立（里面是不是写死了一个搭档 rank 或者数字 2？）',
    'rank {r}: right on the {n} ranks of the first case, but on a world of size {k} your gradients are {c:.3g} x the mean: divide by dist.get_world_size(), not by a number written in the code':
        'rank {r}：第一种情形的 {n} 个 rank 上是对的，但在大小为 {k} 的 world 上，你的梯度是平均值的 {c:.3g} 倍：要除以 dist.get_world_size()，而不是代码里写死的数字',
    'rank {r}: right gradients, but your function ran {f} forwards for {micro} micro-batches: one forward per micro-batch of {size} sequences':
        'rank {r}：梯度是对的，但你的函数为 {micro} 个 micro-batch 做了 {f} 次前向：每个 {size} 条序列的 micro-batch 只做一次前向',
    'rank {r}: right gradients, but the micro-batches do not cover the local batch once each: cut x into {micro} disjoint parts':
        'rank {r}：梯度是对的，但这些 micro-batch 没有把本地 batch 的每一行恰好覆盖一次：把 x 切成 {micro} 个互不重叠的部分',
    "rank {r}: right gradients, but {f} forwards ran before the first backward: every micro-batch's activations were alive at once ({x:.1f}x one micro-batch's saved bytes), which is what accumulation avoids; call backward on each micro-batch's loss right after its forward":
        'rank {r}：梯度是对的，但在第一次反向之前做了 {f} 次前向：所有 micro-batch 的激活同时存活（是一个 micro-batch 保存字节数的 {x:.1f} 倍），而这正是梯度累积要避免的；每个 micro-batch 前向之后立刻对它的 loss 调用 backward',
    "rank {r}: right gradients, but up to {x:.1f}x one micro-batch's saved activations were alive at once (retain_graph=True, or a graph kept alive by a tensor you kept): let each backward free its micro-batch's graph":
        'rank {r}：梯度是对的，但同时存活的保存激活最多达到一个 micro-batch 的 {x:.1f} 倍（retain_graph=True，或者你留着的某个张量让计算图一直活着）：让每次 backward 释放它那个 micro-batch 的计算图',
    'right gradients, but rank {r} all-reduced after micro-batch {k} of {micro}: all-reduce once, after the last of the {micro} micro-batches (not after every one)':
        '梯度是对的，但 rank {r} 在第 {k} 个（共 {micro} 个）micro-batch 之后就做了 all-reduce：只做一次 all-reduce，放在 {micro} 个 micro-batch 中的最后一个之后（不要每个之后都做）',
    'right gradients, but rank {r} all-reduced one gradient {c} times (a tied weight is one parameter: model.parameters() lists it once; a list built from the modules holds it twice): all-reduce each gradient once':
        '梯度是对的，但 rank {r} 对同一个梯度做了 {c} 次 all-reduce（共享（tied）的权重是一个参数：model.parameters() 只列出它一次；按模块逐个收集的列表里它出现两次）：每个梯度只 all-reduce 一次',
    'right gradients, but rank {r} sent {ratio:.2f}x the bytes of one all-reduce of each gradient: all-reduce each gradient once, after the last of the {micro} micro-batches':
        '梯度是对的，但 rank {r} 发送的字节数是每个梯度做一次 all-reduce 的 {ratio:.2f} 倍：每个梯度只 all-reduce 一次，放在 {micro} 个 micro-batch 中的最后一个之后',
    "rank {r}: your gradients are {c:.3g} x one process's on the global batch, every one of them: a factor is wrong (divide each loss by the number of micro-batches, {micro}, and the all-reduced sum by dist.get_world_size(), {n})":
        'rank {r}：你的每一个梯度都是单进程在全局 batch 上梯度的 {c:.3g} 倍：有一个系数错了（每个 loss 除以 micro-batch 的个数 {micro}，all-reduce 得到的和除以 dist.get_world_size()，即 {n}）',
    "{n} ranks x {micro} micro-batches: every gradient equals one process's on the global batch (rtol {rtol:g}), with a tied and a frozen parameter; one forward and one backward per micro-batch, saved activations {saved:.2f}x one micro-batch's; {traffic}; the same on a world of size {k}":
        '{n} 个 rank x {micro} 个 micro-batch：每个梯度都等于单进程在全局 batch 上的梯度（rtol {rtol:g}），模型带有一个共享（tied）参数和一个冻结参数；每个 micro-batch 一次前向、一次反向，保存的激活是一个 micro-batch 的 {saved:.2f} 倍；{traffic}；在大小为 {k} 的 world 上也一样',
    "rank {r}: right gradients, but from one forward and backward on the whole local batch of {b} sequences: nothing was accumulated, and the activations are the big batch's; cut it into {micro} micro-batches of {size} (x.chunk(micro)) and run forward and backward on each":
        'rank {r}：梯度是对的，但它来自在整个 {b} 条序列的本地 batch 上的一次前向和反向：什么都没有累积，激活也是大 batch 的；把它切成 {micro} 个 {size} 条序列的 micro-batch（x.chunk(micro)），对每个做前向和反向',
    'rank {r}: right gradients, but forward {k} saw a tensor of shape {shape} from a local batch of shape {whole}: cut the batch dimension (dim 0), not the sequence':
        'rank {r}：梯度是对的，但第 {k} 次前向看到的张量形状是 {shape}，而本地 batch 的形状是 {whole}：要切 batch 维（dim 0），不是序列维',
    'rank {r}: right gradients, but forward {k} saw {got} sequences: each micro-batch has {size} (the local batch of {b} cut into {micro})':
        'rank {r}：梯度是对的，但第 {k} 次前向看到了 {got} 条序列：每个 micro-batch 应有 {size} 条（{b} 条的本地 batch 切成 {micro} 份）',
    "rank {r}: right gradients, but forward {k}'s output went through {c} backward passes: one backward per micro-batch":
        'rank {r}：梯度是对的，但第 {k} 次前向的输出经过了 {c} 次反向：每个 micro-batch 一次反向',
    'rank {peer} does not exist in a world of size {k} (ranks 0 to {last})':
        '大小为 {k} 的 world 里没有 rank {peer}（rank 只有 0 到 {last}）',
    '{x:.2f}x the bytes of one all-reduce of the gradients':
        '字节数是对梯度做一次 all-reduce 的 {x:.2f} 倍',
    'one all-reduce of each gradient':
        '每个梯度一次 all-reduce',
}
