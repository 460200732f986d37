"""Chinese catalog, part for notebooks 07, 09, 12 and 13: their checkers, the library's printed
lines and its figures (pipeline, memory tricks, context parallelism, experts). Merged into
`labkit.i18n.zh.MESSAGES`, same rules: same format fields as the English key, and none of
`pass`, `FAIL`, `ok:`, `MISS:` or a checker's name inside a message."""

MESSAGES = {
    # -- notebook 07: checker schedule_1f1b (labkit/check/pipeline.py) -------------------------
    "for stage {r} of {p} (m={m}) your function returned {kind}; "
    "return a list of actions such as [F(0), F(1), B(0), ...]":
        "对 {p} 个 stage 中的 stage {r}（m={m}），你的函数返回了 {kind}；"
        "应当返回一个动作列表，例如 [F(0), F(1), B(0), ...]",
    "your function calls labkit's own one_f_one_b (directly or through build), "
    "which is the answer being checked: please write the schedule yourself, "
    "from the three phases (warm-up, steady state, cool-down)":
        "你的函数调用了 labkit 自带的 one_f_one_b（直接调用或经由 build），而它正是要检查的答案："
        "请按三个阶段（预热、稳定、冷却）自己写出调度",
    "p={p}, m={m}: it runs, but stage {r} keeps {peak} micro-batches of "
    "activations alive at once; 1F1B keeps at most p - r = {most} "
    "(stage r does p - 1 - r warm-up forwards, then alternates F and B)":
        "p={p}, m={m}：能跑通，但 stage {r} 同时保留了 {peak} 个 micro-batch 的激活值；"
        "1F1B 最多保留 p - r = {most} 个（stage r 先做 p - 1 - r 次预热前向，然后 F 和 B 交替）",
    "p={p}, m={m}: it runs, but its simulated bubble is {got:.1%}, "
    "1F1B's is (p-1)/(m+p-1) = {want:.1%}: some stage waits longer than it must":
        "p={p}, m={m}：能跑通，但模拟出的气泡比例是 {got:.1%}，而 1F1B 的是 (p-1)/(m+p-1) = {want:.1%}："
        "有的 stage 等待的时间超过了必要",
    "p={p}, m={m}: {problem}": "p={p}, m={m}：{problem}",
    "valid with 1F1B's bubble and memory on {n} shapes":
        "在 {n} 种形状上都有效，气泡和显存都与 1F1B 一致",
    "ran on {p} ranks but the gradients differ from one process's "
    "(max |diff| {diff:.3g}, missing or extra: {missing})":
        "在 {p} 个 rank 上跑完了，但梯度与单进程的不同（最大 |差| {diff:.3g}，缺少或多出的：{missing}）",
    "; ran on {p} ranks with m={m}, gradients equal one process's":
        "；在 {p} 个 rank 上以 m={m} 运行，梯度与单进程的一致",

    # -- notebook 07: validating a schedule (labkit/pipeline/validate.py, schedules.py) -------
    "{a!r} is not an action: write F(i), B(i), I(i), W(i) "
    "(from labkit.pipeline) or strings like 'F3', 'B0'":
        "{a!r} 不是一个动作：请写 F(i)、B(i)、I(i)、W(i)（来自 labkit.pipeline），或 'F3'、'B0' 这样的字符串",
    "the schedule has {k} action lists for {p} stages: give one list per stage":
        "调度有 {k} 个动作列表，而 stage 有 {p} 个：每个 stage 给一个列表",
    "stage {r}, step {k}: {a!r} is out of range (kinds {kinds}, "
    "micro-batches 0..{last_mb}, chunks 0..{last_chunk})":
        "stage {r} 第 {k} 步：{a!r} 超出范围（动作种类 {kinds}，micro-batch 0..{last_mb}，chunk 0..{last_chunk}）",
    "stage {r} runs {what} twice (steps {first} and {k})":
        "stage {r} 把 {what}执行了两次（第 {first} 步和第 {k} 步）",
    "stage {r} never runs {what}": "stage {r} 从来没有执行 {what}",
    "stage {r} runs both B{i} and its halves I{i}/W{i}: use one or the other":
        "stage {r} 既执行了 B{i}，又执行了它拆开的两半 I{i}/W{i}：二者只能选其一",
    " (each I needs its W)": "（每个 I 都需要对应的 W）",
    "stage {r} runs {g!r} (step {kg}) before {f!r} (step {kf}): "
    "a backward needs its own forward's activations":
        "stage {r} 先执行 {g!r}（第 {kg} 步），后执行 {f!r}（第 {kf} 步）：反向需要它自己那次前向的激活值",
    "stage {r} runs {w!r} (step {kw}) before {i!r} (step {ki}): "
    "the weight gradient needs the output gradient that I receives":
        "stage {r} 先执行 {w!r}（第 {kw} 步），后执行 {i!r}（第 {ki} 步）：权重梯度需要 I 收到的输出梯度",
    "stage {r} never runs {what}, which {compute!r} needs before it":
        "stage {r} 从来没有执行 {what}，而 {compute!r} 需要它先完成",
    "stage {r} never runs {what}, which {compute!r} must pass on after it":
        "stage {r} 从来没有执行 {what}，而 {compute!r} 完成后必须把结果传出去",
    "stage {r} runs {compute!r} (step {k1}) before {comm!r} (step {k2}): receive the input first":
        "stage {r} 先执行 {compute!r}（第 {k1} 步），后执行 {comm!r}（第 {k2} 步）：应当先接收输入",
    "stage {r} runs {comm!r} (step {k1}) before {compute!r} (step {k2}): nothing to send yet":
        "stage {r} 先执行 {comm!r}（第 {k1} 步），后执行 {compute!r}（第 {k2} 步）：这时还没有东西可发",
    "stage {r} waits at step {k} ({a!r}) for its own {wa!r}, which comes later":
        "stage {r} 在第 {k} 步（{a!r}）等待它自己的 {wa!r}，而那一步排在后面",
    "stage {wr} is itself stuck at step {k} ({a!r})": "stage {wr} 自己也卡在第 {k} 步（{a!r}）",
    "stage {wr} has finished": "stage {wr} 已经执行完毕",
    "stage {r} waits at step {k} ({a!r}) until stage {wr} reaches the matching {wa!r}; {there}":
        "stage {r} 在第 {k} 步（{a!r}）等待 stage {wr} 走到对应的 {wa!r}；{there}",
    "stage {r} waits at step {k} ({a!r}) for {wa!r} on stage {wr}; {there}":
        "stage {r} 在第 {k} 步（{a!r}）等待 stage {wr} 上的 {wa!r}；{there}",
    " (a blocking send waits for its receive: post each send together with the receive "
    "it pairs with, isend/irecv or batch_isend_irecv)":
        "（阻塞的 send 要等到对应的 recv：把每个 send 和与它配对的 recv 一起发出，"
        "用 isend/irecv 或 batch_isend_irecv）",
    "deadlock: {n} stages can never move: ": "死锁：{n} 个 stage 永远无法推进：",
    "deadlock: {n} stage can never move: ": "死锁：{n} 个 stage 永远无法推进：",
    "; ": "；",
    "this schedule cannot run:": "这个调度无法运行：",
    "{a!r} ({what} of micro-batch {mb}, chunk {chunk})": "{a!r}（micro-batch {mb} 的{what}，chunk {chunk}）",
    "{a!r} ({what} of micro-batch {mb})": "{a!r}（micro-batch {mb} 的{what}）",
    "forward": "前向",
    "backward": "反向",
    "input-gradient backward": "输入梯度反向",
    "weight-gradient backward": "权重梯度反向",
    "send of activations": "激活值发送",
    "receive of activations": "激活值接收",
    "send of gradients": "梯度发送",
    "receive of gradients": "梯度接收",

    # -- notebook 07: the schedule explorer (labkit/pipeline/widgets.py) -----------------------
    "interleaved 1F1B": "交错式 1F1B",
    "schedule": "调度",
    "stages p": "stage 数 p",
    "micro-batches m": "micro-batch 数 m",
    "chunks v": "chunk 数 v",
    "run on the cluster": "在集群上运行",
    "activations held at the peak per stage (micro-batches' worth): {held}; "
    "bubble over ideal (Megatron) {ideal} = {ratio:.1%}":
        "各 stage 峰值时保留的激活值（以 micro-batch 计）：{held}；气泡占理想时间之比（Megatron 口径）{ideal} = {ratio:.1%}",
    "cannot build this schedule: {error}": "无法构造这个调度：{error}",
    "the cluster has {n} ranks: set p = {n} to run this schedule on it":
        "集群有 {n} 个 rank：把 p 设为 {n} 才能在集群上运行这个调度",
    "simulated with this run's measured times: bubble {twin:.1%} "
    "(measured {measured:.1%}, formula {formula:.1%})":
        "用这次运行实测的时间模拟：气泡 {twin:.1%}（实测 {measured:.1%}，公式 {formula:.1%}）",

    # -- notebook 07: every schedule side by side (labkit/pipeline/compare.py; Table translates
    #    its header, title and notes as whole strings) ---------------------------------------
    "idle per rank, simulated": "每个 rank 的空闲时间，模拟",
    "idle, formula": "空闲时间，公式",
    "bubble (idle / total)": "气泡（空闲 / 总时间）",
    "bubble in own span": "自身跨度内的气泡",
    "rank 0 holds, counted": "rank 0 保留量，数出来的",
    "rank 0 holds, formula": "rank 0 保留量，公式",
    "weights per rank": "每个 rank 的权重",
    "p={p} ranks, m={m} micro-batches; per rank's layers F={f:g}, I={i:g}, "
    "W={w:g} (a chunk of a V: half)":
        "p={p} 个 rank，m={m} 个 micro-batch；每个 rank 自己那几层的耗时 F={f:g}，I={i:g}，W={w:g}"
        "（V 形调度中的一个 chunk：减半）",
    "idle formulas: 1F1B and GPipe (p-1)(F+B), interleaved (p-1)(F+B)/v, ZB-H1 (p-1)(F+B-2W), "
    "DualPipeV (p-1)(F&B+B-3W) with F&B = F+B and F, B, W per chunk (DeepSeek-V3, Table 2), "
    "DualPipe (p/2-1)(F&B+B-3W) per stage; ZB-V: 0 in its own span when F = I = W (Qi et al. 2024)":
        "空闲时间公式：1F1B 和 GPipe 为 (p-1)(F+B)，交错式为 (p-1)(F+B)/v，ZB-H1 为 (p-1)(F+B-2W)，"
        "DualPipeV 为 (p-1)(F&B+B-3W)，其中 F&B = F+B，F、B、W 均按 chunk 计（DeepSeek-V3，表 2），"
        "DualPipe 为每个 stage (p/2-1)(F&B+B-3W)；ZB-V：当 F = I = W 时，在自身跨度内为 0（Qi et al. 2024）",
    "holds: activations at the peak, in units of one micro-batch through 1/p of the model (a "
    "1F1B stage); weights: parameters per rank against 1F1B's 1/p of the model":
        "保留量：峰值时的激活值，单位是一个 micro-batch 流过 1/p 个模型（1F1B 的一个 stage）的激活值；"
        "权重：每个 rank 的参数量，以 1F1B 的 1/p 个模型为 1",

    # -- notebook 07: Gantt charts and bubble plots (labkit/pipeline/draw.py) -------------------
    "input grad (I)": "输入梯度 (I)",
    "weight grad (W)": "权重梯度 (W)",
    "idle": "空闲",
    "stage {r}": "stage {r}",
    "seconds since the step started": "从这一步开始算起的秒数",
    "time (units of one forward)": "时间（以一次前向为单位）",
    "simulated with the measured times": "用实测时间模拟",
    "simulated": "模拟",
    "bubble {bubble:.1%}": "气泡 {bubble:.1%}",
    ", {bubble:.1%} within each rank's own span": "，在每个 rank 自己的时间跨度内为 {bubble:.1%}",
    ", formula (p-1)/({vm}+p-1) = {ratio:.1%}": "，公式 (p-1)/({vm}+p-1) = {ratio:.1%}",
    "paler: chunk 1, 2, ...": "颜色较浅：chunk 1, 2, ...",
    "numbers: micro-batch": "数字：micro-batch 编号",
    "\n(left out where\na bar is too narrow)": "\n（条太窄处\n不标）",
    "{name} on the cluster, live": "{name} 在集群上实时运行",
    "{done}/{total} actions done; running bubble {bubble:.1%}": "已完成 {done}/{total} 个动作；当前气泡 {bubble:.1%}",
    "formula (p-1)/({vm}+p-1)": "公式 (p-1)/({vm}+p-1)",
    "{name} (measured)": "{name}（实测）",
    "bubble: idle / total": "气泡：空闲 / 总时间",
    "Bubble against m, p={p}": "气泡随 m 的变化，p={p}",
    "peak saved activations (KiB)": "峰值保存的激活值 (KiB)",
    "Activation memory per stage, measured": "每个 stage 的激活显存，实测",
    "numbers: micro-batches alive at the peak)": "数字：峰值时存活的 micro-batch 数）",
    "micro-batches' worth held": "保留量（以 micro-batch 计）",
    "Activations held at the peak: bars measured on the ranks": "峰值时保留的激活值：柱子是在各 rank 上实测的",
    ", ": "，",
    "numbers counted from the schedule": "数字是从调度数出来的",

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
    "{k} of {n}": "第 {k} / {n}",
    ", step {ratio:.2f}x": "，step 耗时 {ratio:.2f} 倍",
    "these gradients are fp16: dividing them by the scale in fp16 would "
    "flush the small ones to zero again. Keep fp32 masters (labkit.zero."
    "masters.MasterOptimizer) or fp32 parameters under "
    "torch.autocast(dtype=torch.float16)":
        "这些梯度是 fp16 的：在 fp16 里除以缩放因子，会把小的梯度再次冲成 0。请保留 FP32 主权重"
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
    "gradient elements flushed to zero (of {n})": "被冲成 0 的梯度元素（共 {n} 个）",

    # -- notebook 12: checker online_softmax_merge (labkit/check/cp.py) -----------------------
    "o_a + o_b: each partial output is normalised by its own block's sum; "
    "weight it by exp(lse_a - lse) and exp(lse_b - lse) before adding":
        "o_a + o_b：每个部分输出都是按它自己那个块的和归一化的；相加之前要分别乘上权重 "
        "exp(lse_a - lse) 和 exp(lse_b - lse)",
    "the plain average of the two outputs: right only when both blocks have the same "
    "sum; weight each by exp(lse_x - lse), its block's share of the total":
        "这是两个输出的简单平均：只有两个块的和相等时才对；每个输出要乘上 exp(lse_x - lse)，即它那个块在总和中所占的比例",
    "weights exp(lse_a) and exp(lse_b) are the blocks' sums, not their shares: "
    "divide by exp(lse) (that is, use exp(lse_a - lse))":
        "权重 exp(lse_a) 和 exp(lse_b) 是各块的和，不是它们所占的比例：还要除以 exp(lse)（也就是用 exp(lse_a - lse)）",
    "the merged output is divided by exp(lse) again: exp(lse_a - lse) o_a + "
    "exp(lse_b - lse) o_b is already normalised":
        "合并后的输出又除了一次 exp(lse)：exp(lse_a - lse) o_a + exp(lse_b - lse) o_b 已经是归一化的了",
    "the weights are swapped: o_a takes exp(lse_a - lse), o_b takes exp(lse_b - lse)":
        "权重用反了：o_a 应乘 exp(lse_a - lse)，o_b 应乘 exp(lse_b - lse)",
    "exp(lse - lse_a) is the inverse of the weight: use exp(lse_a - lse)":
        "exp(lse - lse_a) 是权重的倒数：应当用 exp(lse_a - lse)",
    "only the block with the larger log-sum-exp is kept; the other block's keys "
    "are dropped instead of merged with weight exp(lse_x - lse)":
        "只保留了 log-sum-exp 较大的那个块；另一个块的 key 被丢掉了，而不是以权重 exp(lse_x - lse) 合并进来",
    "lse = max(lse_a, lse_b) forgets the smaller block's sum: lse = log(exp(lse_a) + exp(lse_b)) "
    "(torch.logaddexp)":
        "lse = max(lse_a, lse_b) 漏掉了较小那个块的和：应为 lse = log(exp(lse_a) + exp(lse_b))（torch.logaddexp）",
    "lse = lse_a + lse_b multiplies the two sums; they add: lse = log(exp(lse_a) + exp(lse_b))":
        "lse = lse_a + lse_b 相当于把两个和相乘；它们应当相加：lse = log(exp(lse_a) + exp(lse_b))",
    "lse is not updated (lse_a returned): the next block merged gets the wrong weight; "
    "return log(exp(lse_a) + exp(lse_b))":
        "lse 没有更新（返回的是 lse_a）：下一个合并进来的块会拿到错误的权重；应返回 log(exp(lse_a) + exp(lse_b))",
    "lse = mean of the two: lse = log(exp(lse_a) + exp(lse_b)) (torch.logaddexp)":
        "lse 取了两者的平均：应为 lse = log(exp(lse_a) + exp(lse_b))（torch.logaddexp）",
    "your merge raised RuntimeError: {error}: o is (batch, heads, queries, head_dim) "
    "and lse (batch, heads, queries); weights need [..., None] to scale the rows of o":
        "你的合并函数抛出了 RuntimeError：{error}：o 的形状是 (batch, heads, queries, head_dim)，"
        "lse 是 (batch, heads, queries)；权重需要加上 [..., None] 才能按行缩放 o",
    "return a pair (o, lse); got {kind} of {n}": "应返回一对 (o, lse)；得到的是含 {n} 个元素的 {kind}",
    "return a pair (o, lse); got {kind}": "应返回一对 (o, lse)；得到的是 {kind}",
    "two halves of one softmax": "同一个 softmax 的两半",
    "a block some queries cannot see (lse = -inf, o = 0)": "有些 query 完全看不到的块（lse = -inf，o = 0）",
    "scores near 120 (exp overflows fp32)": "得分接近 120（exp 会让 fp32 溢出）",
    "return tensors (o, lse); got {o}, {lse}": "应返回张量 (o, lse)；得到的是 {o}、{lse}",
    "on {label}: o is {o} and lse {lse}; want {o_want} and {lse_want} (weights need "
    "[..., None] to scale the rows of o)":
        "在“{label}”上：o 的形状是 {o}，lse 是 {lse}；应为 {o_want} 和 {lse_want}（权重需要加上 [..., None] 才能按行缩放 o）",
    "on {label}: inf or nan in the result: exp(lse_a) overflows when the "
    "scores are large; subtract the larger log-sum-exp first "
    "(exp(lse_a - lse) with lse = torch.logaddexp(lse_a, lse_b))":
        "在“{label}”上：结果里有 inf 或 nan：得分很大时 exp(lse_a) 会溢出；先减去较大的 log-sum-exp"
        "（用 exp(lse_a - lse)，其中 lse = torch.logaddexp(lse_a, lse_b)）",
    "on {label}: inf or nan in the result: a row that sees no key of a block has "
    "lse = -inf; exp(lse_b - lse) = 0 handles it, (-inf) - (-inf) does not":
        "在“{label}”上：结果里有 inf 或 nan：看不到某个块任何 key 的那一行，lse = -inf；"
        "exp(lse_b - lse) = 0 能正确处理它，(-inf) - (-inf) 却不能",
    "on {label}: {why}": "在“{label}”上：{why}",
    "on {label}: o differs from the softmax over both blocks by up to {err:.3g}: "
    "o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b":
        "在“{label}”上：o 与在两个块上一起做 softmax 的结果最多相差 {err:.3g}：o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b",
    "o is right but {why}": "o 是对的，但 {why}",
    "on {label}: o is right but lse differs from log(exp(lse_a) + exp(lse_b)) by up "
    "to {err:.3g}":
        "在“{label}”上：o 是对的，但 lse 与 log(exp(lse_a) + exp(lse_b)) 最多相差 {err:.3g}",
    "your merge raised {kind}: {error}": "你的合并函数抛出了 {kind}：{error}",
    "right on the examples, but ring attention with it on {n} ranks differs from "
    "one process by {worst:.3g}":
        "在示例上是对的，但用它在 {n} 个 rank 上做环形注意力（ring attention），结果与单进程相差 {worst:.3g}",
    "ring attention with your merge on {n} ranks (causal, zig-zag, 23 positions) matches "
    "one process: output and gradients within {tol:g}":
        "用你的合并函数在 {n} 个 rank 上做环形注意力（因果，zig-zag 布局，23 个位置），与单进程一致：输出和梯度的误差都在 {tol:g} 以内",

    # -- notebook 12: figures (labkit/cp/draw.py, overlap.py) ---------------------------------
    "K/V {src}": "K/V {src}",
    "step {t}": "第 {t} 步",
    "rank {r}": "rank {r}",
    "ring attention, {layout} layout{causal}\nthe K/V block each rank holds; "
    "arrows: sent on (rank {last}'s to rank 0)":
        "环形注意力，{layout} 布局{causal}\n每个 rank 持有的 K/V 块；箭头：传给下一个 rank（rank {last} 的传给 rank 0）",
    ", causal": "，因果",
    "all keys visible": "所有 key 可见",
    "part masked": "部分被 mask 遮住",
    "skipped (all masked)": "跳过（全部被 mask 遮住）",
    "contiguous": "连续分块",
    "zig-zag": "zig-zag",
    "{name}{causal}: K/V block held per step": "{name}{causal}：每一步持有的 K/V 块",
    "{layout}: measured": "{layout}：实测",
    "formula (labkit.cp.layout)": "公式（labkit.cp.layout）",
    "score entries computed per rank": "每个 rank 计算的注意力得分个数",
    "causal attention: work per rank": "因果注意力：每个 rank 的计算量",
    "milliseconds": "毫秒",
    "forward: attention on a block": "前向：在一个块上做注意力",
    "backward: gradients of a block": "反向：一个块的梯度",
    "transfer in flight (posted -> seen done)": "传输进行中（发出 -> 确认完成）",
    "waiting for it (exposed)": "等待传输（暴露在外的时间）",
    "one ring-attention step per rank": "每个 rank 上的一步环形注意力",
    "ring attention, live": "环形注意力，实时",

    # -- notebook 13: checker ep_dispatch (labkit/check/moe.py) --------------------------------
    "rank {rank} waited in its all-to-all number {i} for rank {other}, which never called it":
        "rank {rank} 在它的第 {i} 次 all-to-all 里等待 rank {other}，而后者从来没有调用它",
    "in all-to-all number {i} rank {dst} expects {expected} rows from rank "
    "{src}, which sends {sent}: a rank only knows what it sends; exchange "
    "the split sizes first (an all-to-all of the counts), and in the combine "
    "swap input and output splits":
        "在第 {i} 次 all-to-all 里，rank {dst} 期望从 rank {src} 收到 {expected} 行，而对方发送的是 {sent} 行："
        "一个 rank 只知道自己要发送多少；先交换切分大小（对各行数做一次 all-to-all），"
        "并在合并（combine）时把输入和输出的切分对调",
    "the splits must add up to the rows you pass: in the combine, swap input "
    "and output splits (send back what you received)":
        "各切分之和必须等于你传入的行数：在合并（combine）时，把输入和输出的切分对调（收到多少就送回多少）",
    "`experts` holds only this rank's E/n experts: expert e is "
    "experts[e - rank * E/n]":
        "`experts` 里只有这个 rank 的 E/n 个专家：专家 e 是 experts[e - rank * E/n]",
    "rank {r}: returned {shape}, expected a tensor of shape {want} (one row per row of xs)":
        "rank {r}：返回的是 {shape}，应为形状 {want} 的张量（xs 的每一行对应一行）",
    "rank {r}: the gates are applied twice (gate^2 x expert(row)): multiply by the gate "
    "once, after the combine":
        "rank {r}：门控权重乘了两次（gate^2 x expert(row)）：在合并（combine）之后只乘一次",
    "rank {r}: the gates are missing: each row comes back as expert(row); multiply it by "
    "its gate":
        "rank {r}：缺少门控权重：每一行回来时都是 expert(row)；要乘上它的门控权重",
    "rank {r}: every row is a right result but in the wrong place (row {i} holds the "
    "result of rank {src}'s row {k}): put the expert outputs back in arrival order (undo "
    "the regrouping by expert) before the combine":
        "rank {r}：每一行都是正确的结果，但位置不对（第 {i} 行放的是 rank {src} 第 {k} 行的结果）："
        "在合并（combine）之前，把专家的输出按到达顺序放回去（撤销按专家重新分组）",
    " (expert e on rank e % n: round-robin)": "（专家 e 放在了 rank e % n 上：轮流分配）",
    "rank {r}: row {i} went through expert {got} instead of expert {want}{rr}: expert e "
    "lives on rank e // (E/n) as local expert e % (E/n), and rows arrive grouped by "
    "source rank first: regroup them by expert before running the experts":
        "rank {r}：第 {i} 行经过的是专家 {got}，而不是专家 {want}{rr}：专家 e 位于 rank e // (E/n)，"
        "是那里的第 e % (E/n) 个本地专家；而且到达的行先按来源 rank 分组：运行专家之前要按专家重新分组",
    "rank {r}: the rows differ from gate x expert(row) by {err:.3g}":
        "rank {r}：这些行与 gate x expert(row) 相差 {err:.3g}",
    "rank {r}: no gradient reached xs: torch's dist.all_to_all_single does not "
    "differentiate; send the rows with labkit.moe.all_to_all":
        "rank {r}：没有梯度传回 xs：torch 的 dist.all_to_all_single 不支持求导；用 labkit.moe.all_to_all 发送这些行",
    "rank {r}: the gradient of xs differs from one process by {err:.3g}":
        "rank {r}：xs 的梯度与单进程的相差 {err:.3g}",
    "rank {r}: an expert's weight gradient differs from one process (every rank's rows "
    "must reach it)":
        "rank {r}：某个专家的权重梯度与单进程的不同（每个 rank 的行都必须送到它那里）",
    "needs a cluster of at least 2 ranks": "需要至少有 2 个 rank 的集群",
    "{n} ranks, {e} experts, uneven skewed rows: outputs and the gradients of the rows "
    "and of every expert equal one process":
        "{n} 个 rank，{e} 个专家，各 rank 行数不均且偏斜：输出、各行的梯度以及每个专家的梯度都与单进程一致",

    # -- notebook 13: errors of the MoE layer (labkit/moe/layer.py, parallel.py) ---------------
    "k = {k} experts per token, but the layer has {experts} experts: choose 1 <= k <= {experts}":
        "每个 token 选 k = {k} 个专家，但这一层只有 {experts} 个专家：请取 1 <= k <= {experts}",
    "capacity_factor = {c}: it must be > 0 (1.0 gives each expert an equal "
    "share of the tokens), or None for no limit":
        "capacity_factor = {c}：必须 > 0（1.0 表示每个专家分到同样多的 token），或取 None 表示不设上限",
    "MoE{where}: expected tokens of shape (tokens, {hidden}), got {shape}: "
    "flatten (batch, sequence) into tokens and check the hidden size":
        "MoE{where}：期望 token 的形状为 (tokens, {hidden})，得到的是 {shape}：把 (batch, sequence) 展平成 token，并检查 hidden size",
    " on rank {rank}": "（rank {rank}）",
    "rank {r} has hidden size {w}": "rank {r} 的 hidden size 是 {w}",
    "MoE on rank {rank}: expected tokens of shape (tokens, {hidden}) on every rank, "
    "but {who}: give every rank tokens of the layer's hidden size":
        "rank {rank} 上的 MoE：期望每个 rank 上 token 的形状都是 (tokens, {hidden})，但 {who}：让每个 rank 的 token 都用这一层的 hidden size",
    "expert_parallel expects a labkit.moe.MoE, got {kind}": "expert_parallel 需要一个 labkit.moe.MoE，得到的是 {kind}",
    "expert_parallel on rank {rank}: {e} experts do not divide over {n} ranks "
    "({e} / {n} = {q:.2f}); use a number of experts that is a multiple of the "
    "group size":
        "rank {rank} 上的 expert_parallel：{e} 个专家无法平均分到 {n} 个 rank 上（{e} / {n} = {q:.2f}）；专家数要是进程组大小的整数倍",
    "expert_parallel on rank {rank}: this MoE is already sharded ({k} of {e} "
    "experts here)":
        "rank {rank} 上的 expert_parallel：这个 MoE 已经切分过了（这里只有 {e} 个专家中的 {k} 个）",

    # -- notebook 13: figures (labkit/moe/draw.py) ----------------------------------------------
    "tokens of rank {r}": "rank {r} 的 token",
    "routing: each token's first choice; arrows coloured by the rank that holds the expert":
        "路由：每个 token 的首选专家；箭头颜色表示持有该专家的 rank",
    "balanced": "均衡",
    "expert (colour: rank that holds it)": "专家（颜色：持有它的 rank）",
    "tokens computed": "计算的 token 数",
    "{title} step {step}": "{title} 第 {step} 步",
    "balanced: 1/{n}": "均衡：1/{n}",
    "busiest rank's share": "最忙 rank 的占比",
    "the busiest rank's share of all tokens": "最忙的 rank 占全部 token 的比例",
}
