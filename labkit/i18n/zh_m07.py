"""Chinese catalog, notebook 07 (pipeline): its checker, the library's printed lines and its
figures, and the list separator ", " of the whole library. Merged into `labkit.i18n.zh`. Same rules:
same format fields as the English key, and none of `pass`, `FAIL`, `ok:`, `MISS:` or a checker's
name inside a message."""
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
        "有的 stage 等待的时间超过了必要的时间",
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
    "rank 0 holds, counted": "rank 0 保留量（按调度计数）",
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

    # -- notebook 07: arguments of the bubble formulas (labkit/pipeline/formulas.py) ------------
    "{name} must be a whole number >= 1, got {value!r} (stages={stages!r}, "
    "microbatches={microbatches!r}, chunks={chunks!r})":
        "{name} 必须是 >= 1 的整数，收到的是 {value!r}（stages={stages!r}，"
        "microbatches={microbatches!r}，chunks={chunks!r}）",
    "no formula for {name!r}: choose gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipe-v or dualpipe":
        "没有 {name!r} 的公式：请从 gpipe、1f1b、interleaved、zb-h1、zb-v、dualpipe-v 和 dualpipe 中选一个",
    "no idle formula for {name!r}: choose 1f1b, zb-h1, zb-v, dualpipe-v or dualpipe":
        "没有 {name!r} 的空转时间公式：请从 1f1b、zb-h1、zb-v、dualpipe-v 和 dualpipe 中选一个",
    # -- notebook 07: model state per stage (labkit/pipeline/stage_memory.py) --
    "cut": "切分",
    "sum / one process": "总和 / 单进程",
    "largest / one process": "最大 / 单进程",
    "Model state held per rank (weights, gradients, Adam), measured after one step":
        "每个 rank 持有的模型状态（权重、梯度、Adam），一次 step 后测得",
    # -- notebook 07's code cells: verdicts, table headers and titles -------------------------
    "idle / total (notes, GPipe)": "空闲 / 总时间（讲义，GPipe）",
    "idle / ideal (Megatron)": "空闲 / 理想时间（Megatron）",
    "both bubbles equal (p-1)/(m+p-1) (to 1e-9, float rounding); GPipe holds m = 8 on every stage, "
    "1F1B p - r":
        "两个气泡都等于 (p-1)/(m+p-1)（误差 1e-9 以内，浮点舍入）；GPipe 每个 stage 都持有 m = 8 份，"
        "1F1B 持有 p - r 份",
    "interleaved's bubble equals (p-1)/(vm+p-1) (to 1e-9); ZB-H1's is below 1F1B's":
        "interleaved 的气泡等于 (p-1)/(vm+p-1)（误差 1e-9 以内）；ZB-H1 的低于 1F1B 的",
    "stage 0's count from the lists equals its formula for all 4 schedules, exactly":
        "4 种调度下，从动作列表数出的 stage 0 的数量都与公式完全相等",
    "stage 0, formula": "stage 0，公式",
    "I + W multiplies exactly B's FLOPs, the naive W more; same gradients as B (within 1e-6)":
        "I + W 的矩阵乘 FLOPs 与 B 完全相同，朴素的 W 更多；梯度与 B 相同（误差 1e-6 以内）",
    "autograd calls": "autograd 调用次数",
    "nodes evaluated": "求值的节点数",
    "matmul MFLOP": "矩阵乘 MFLOP",
    "time / B: median (min-max)": "时间 / B：中位数（最小-最大）",
    "the simulation with the measured times reproduces the measured "
    "bubble within 0.02 (7 runs here: 0.001 to 0.003)":
        "用实测耗时做的模拟复现了实测的气泡，误差在 0.02 以内（这里跑了 7 次：0.001 到 0.003）",
    "on every stage of every run the measured peak equals the count from the lists (bytes: exact)":
        "每次运行的每个 stage 上，实测峰值都等于从动作列表数出的数量（字节：完全相等）",
    "stage 0, counted": "stage 0，数出的",
    "stage 0 peak KiB": "stage 0 峰值 KiB",
    "Activations held at the peak, measured on the ranks, in micro-batches' worth":
        "峰值时持有的激活，在各 rank 上实测，以 micro-batch 份数计",
    "layers per stage": "每个 stage 的层数",
    "measured bubble": "实测气泡",
    "simulated (measured times)": "模拟（用实测耗时）",
    "step s": "每步 s",
    "each rank holds exactly its layers' share of the model state (2/8 each; 5/8 on the big stage), "
    "and the stages add up to one process's":
        "每个 rank 持有的模型状态恰好是它那些层所占的份额（各 2/8；大的 stage 上 5/8），"
        "各 stage 加起来等于单进程的",
    "labkit step ms": "labkit 每步 ms",
    "torch step ms": "torch 每步 ms",
    "labkit loss": "labkit loss",
    "torch loss": "torch loss",
    "largest |gradient - one process|": "最大 |梯度 - 单进程|",
    "counted from the lists": "从动作列表数出的",
    "ZB-V and DualPipeV on 4 ranks, m = 8: gradients and activations held at the peak, measured":
        "4 个 rank 上的 ZB-V 和 DualPipeV，m = 8：梯度与峰值时持有的激活，实测",
    "what": "项目",
    "formula or count": "公式或计数",
}
