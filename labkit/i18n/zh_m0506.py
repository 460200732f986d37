"""Chinese catalog, notebooks 05a/05b (FSDP) and 06 (tensor parallelism): their checkers, the
errors of labkit.fsdp and labkit.tp, their figures, and the column headers of those notebooks'
tables (merged by labkit.i18n.zh, PARTS). Same rules as every catalog: the English key's format
fields, and the words programs read left as they are."""

MESSAGES = {
    # -- notebooks 05a/05b: fsdp_budget (labkit/check/fsdp.py) ---------------------------------
    "choose() must return a dict with keys {keys}, got {got}":
        "choose() 必须返回一个键为 {keys} 的 dict，却得到了 {got}",
    "the dict needs exactly the keys {keys}": "这个 dict 的键必须恰好是 {keys}",
    "; missing {missing}": "；缺少 {missing}",
    "; unknown {extra}": "；多出了不认识的 {extra}",
    "wrap={w!r} is not one of {wraps} (whole model, one unit per transformer block, one per "
    "nn.Linear)":
        "wrap={w!r} 不在 {wraps} 之中（整个模型一个单元、每个 transformer block 一个单元、每个 "
        "nn.Linear 一个单元）",
    "strategy={s!r} is FSDP1's name (ShardingStrategy.{s}); labkit.fsdp.shard takes the FSDP2 "
    "form: strategy={new!r}":
        "strategy={s!r} 是 FSDP1 的名字（ShardingStrategy.{s}）；labkit.fsdp.shard 用的是 FSDP2 的写法："
        "strategy={new!r}",
    "strategy={s!r} is not one of {names}": "strategy={s!r} 不在 {names} 之中",
    " (fp16 needs a loss scaler; FSDP2's policy here is bf16)":
        "（fp16 需要损失缩放器；这里 FSDP2 的混合精度策略用 bf16）",
    "precision={p!r} is not 'fp32' or 'bf16'{hint}": "precision={p!r} 既不是 'fp32' 也不是 'bf16'{hint}",
    "offload must be True or False, got {o!r} ({kind})": "offload 必须是 True 或 False，却得到了 {o!r}（{kind}）",
    "strategy='hybrid' needs a 2 x 2 mesh: run it on 4 ranks (this cluster has {n})":
        "strategy='hybrid' 需要 2 x 2 的 mesh：请在 4 个 rank 上运行（这个集群有 {n} 个）",
    "{said}: peak {peak} per rank (rank {rank}), {left} under the {budget} budget":
        "{said}：每个 rank 的显存峰值 {peak}（rank {rank}），比 {budget} 的预算低 {left}",
    "{said}: peak {peak} per rank (rank {rank}), {over} over the {budget} budget; the choice that "
    "cost the most: {k}={mine!r} ({k}={thrifty!r} would save {saved})":
        "{said}：每个 rank 的显存峰值 {peak}（rank {rank}），超出 {budget} 的预算 {over}；"
        "代价最大的选择是 {k}={mine!r}（改成 {k}={thrifty!r} 能省下 {saved}）",

    # -- notebooks 05a/05b: errors of labkit.fsdp (apply.py, runs.py, strategies.py) ----------
    "wrap must be one of {wraps}, got {wrap!r}": "wrap 必须是 {wraps} 之一，却得到了 {wrap!r}",
    "wrap='block' looks for the model's nn.ModuleList of blocks; {kind} has none: use "
    "wrap='linear' or 'model'":
        "wrap='block' 要在模型里找由 block 组成的 nn.ModuleList；{kind} 没有：改用 wrap='linear' 或 'model'",
    "strategy='hybrid' needs 1 < replicas < world size and replicas dividing it: world_size={n}, "
    "replicas={replicas}":
        "strategy='hybrid' 要求 1 < replicas < world size 且 replicas 整除 world size：world_size={n}，"
        "replicas={replicas}",
    "precision must be 'fp32' or 'bf16', got {precision!r}":
        "precision 必须是 'fp32' 或 'bf16'，却得到了 {precision!r}",
    "strategy must be one of {names} (FSDP1: {fsdp1}), got {name!r}":
        "strategy 必须是 {names} 之一（FSDP1 的写法：{fsdp1}），却得到了 {name!r}",

    # -- notebook 05a: what each sharding strategy means (labkit/fsdp/strategies.py: Strategy.note,
    #    the last column of the table of section 1) ------------------------------------------
    "parameters, gradients and optimizer state sharded; parameters gathered for forward and "
    "again for backward":
        "参数、梯度和优化器状态都分片；前向时 all-gather 一次参数，反向时再 all-gather 一次",
    "full parameters kept from forward to the end of backward: one all-gather per step; ZeRO-2's "
    "memory only outside that window":
        "从前向开始一直到反向结束都保留完整参数：每步只 all-gather 一次；只有在这段时间之外，"
        "显存占用才是 ZeRO-2 的水平",
    "every rank holds everything; gradients all-reduced, as DDP":
        "每个 rank 都持有全部参数和状态；梯度做 all-reduce，与 DDP 相同",
    "sharded inside a group (a node), replicated across groups: parameters gathered inside the "
    "group, gradients reduce-scattered inside it and all-reduced across groups":
        "组内（一个节点）分片，组间复制：参数在组内 all-gather，梯度先在组内 reduce-scatter，"
        "再在组间 all-reduce",

    # -- notebooks 05a/05b: the figures (labkit/fsdp/plots.py) ---------------------------------
    "peak gathered params (kB)": "gather 后参数的峰值（kB）",
    "peak gathered parameters, kB per rank": "gather 后参数的峰值，每个 rank 的 kB",
    "wrap (one FSDP unit per ...)": "wrap（每个 FSDP 单元包住……）",
    "coarse: a high peak": "粒度粗：峰值高",
    "fine: many small calls": "粒度细：调用多而小",
    "calls per training step": "每个训练 step 的调用次数",
    "all-gathers": "all-gather 次数",
    "reduce-scatters": "reduce-scatter 次数",
    "all-gather": "all-gather",
    "reduce-scatter": "reduce-scatter",
    "compute": "计算",
    "collectives": "集合通信",
    "prefetch=False": "prefetch=False（不预取）",
    "prefetch=True": "prefetch=True（显式预取）",
    "ms since the step started (rank 0; numbers: block index, where the bar has room)":
        "从 step 开始算起的毫秒数（rank 0；条上的数字：block 序号，条够宽时才标）",
    "kB on this rank (log scale)": "本 rank 上的 kB（对数坐标）",
    "step and phase (a missing bar: 0 bytes)": "step 与阶段（没有柱子：0 字节）",
    "rank {rank}: bytes by category, log scale": "rank {rank}：按类别统计的字节数，对数坐标",
    "FSDP2 full shard, rank 0: bytes by category, log scale":
        "FSDP2 全分片，rank 0：按类别统计的字节数，对数坐标",
    "params": "参数",
    "grads": "梯度",
    "master": "FP32 主权重",
    "moments": "优化器动量",
    "gathered": "all-gather 后的完整参数",
    "activations": "激活值",

    # -- notebooks 05a/05b: column headers of the tables (labkit.tables.Table translates them) ---
    "units": "单元数",
    "gathered peak": "完整参数峰值",
    "/ whole model in bf16": "/ 整个模型（bf16）",
    "flat params on rank 0": "rank 0 上的 flat 参数",
    "max |params - one fp32 process|": "max |参数 - 单进程 fp32|",
    "how far the step moved a weight": "这一步把权重挪了多远",
    "within 5 % of the move": "误差在挪动量的 5 % 以内",
    "strategy": "分片策略",
    "precision": "精度",
    "device peak (most over the ranks)": "设备显存峰值（各 rank 中最大）",
    "0.6 MB budget": "0.6 MB 预算",
    "all-gathers (rules)": "all-gather 次数（按规则）",
    "reduce-scatters (rules)": "reduce-scatter 次数（按规则）",
    "unsharded grads held after": "之后持有的未分片梯度",
    "full params held after": "之后持有的完整参数",
    "max diff vs one process": "与单进程的最大差",

    # -- notebook 06: row_parallel (labkit/check/tp.py) ----------------------------------------
    "called {call}": "调用了 {call}",
    "returned from {phase}": "从 {phase} 返回了",
    "raised {error}": "抛出了 {error}",
    "ranks {ranks} {what}": "rank {ranks} {what}",
    "rank {ranks} {what}": "rank {ranks} {what}",
    "the ranks disagree at the {nth} collective of {phase}: {said}. Every rank must call the "
    "same collectives in the same order with the same shapes (gloo hangs or aborts the process "
    "otherwise): no collective under `if rank == ...`":
        "各 rank 在 {phase} 的第 {nth} 个集合通信上不一致：{said}。每个 rank 都必须以相同的顺序、"
        "相同的形状调用相同的集合通信（否则 gloo 会卡住或中止进程）：不要把集合通信放在 "
        "`if rank == ...` 里",
    "rank {late} did not reach its {nth} collective of {phase} within {limit:.0f} s, where rank "
    "{rank} {what}":
        "rank {late} 在 {limit:.0f} s 内没有走到 {phase} 的第 {nth} 个集合通信，而 rank {rank} "
        "在这里{what}",
    "forward returned {kind}, not a tensor": "forward 返回的是 {kind}，不是张量",
    "forward returned shape {got}, expected {want} (batch, seq, out_features)":
        "forward 返回的形状是 {got}，应为 {want}（batch, seq, out_features）",
    "backward failed: {msg} (return one gradient per input of forward, each shaped like that "
    "input: x shard, weight shard, bias, None)":
        "backward 出错：{msg}（forward 的每个输入都要返回一个梯度，形状与该输入相同：x 分片、"
        "权重分片、bias、None）",
    "{t}x the right one ({t} = the number of ranks: summed over the ranks once too often, or "
    "multiplied by the world size)":
        "正确值的 {t} 倍（{t} 即 rank 数：在各 rank 上多求和了一次，或者乘了 world size）",
    "{c:.3g}x the right one (1/{t}, one over the number of ranks: divided by the world size, or "
    "averaged where a sum is needed)":
        "正确值的 {c:.3g} 倍（1/{t}，即 rank 数的倒数：除了 world size，或者在该求和的地方求了平均）",
    "{c:.3g}x the right one": "正确值的 {c:.3g} 倍",
    "rank {rank}: {error}": "rank {rank}：{error}",
    "rank {rank}: the all-reduce is in the wrong direction: forward returned this rank's partial "
    "product, and backward summed the input gradient. A row-parallel layer sums the partial "
    "outputs in forward (Megatron's g) and needs no collective in backward":
        "rank {rank}：all-reduce 放反了方向：forward 返回的是本 rank 的部分积，backward 却对输入梯度"
        "求了和。行切分的层在 forward 里对各部分输出求和（Megatron 的 g），backward 里不需要任何集合通信",
    "rank {rank}: forward returned this rank's partial product x_r W_r^T without summing it over "
    "ranks: all-reduce it (dist.all_reduce) before returning":
        "rank {rank}：forward 返回了本 rank 的部分积 x_r W_r^T，没有在各 rank 间求和：返回前先对它做 "
        "all-reduce（dist.all_reduce）",
    "rank {rank}: the bias is counted {t} times: it was added on every rank before the all-reduce. "
    "Sum the partial products first, then add the bias once":
        "rank {rank}：bias 被算了 {t} 次：每个 rank 都在 all-reduce 之前加了 bias。先对部分积求和，"
        "再只加一次 bias",
    "rank {rank}: the output is 1/{t} of the right one: the partial products must be summed "
    "(ReduceOp.SUM), not averaged":
        "rank {rank}：输出是正确值的 1/{t}：部分积要求和（ReduceOp.SUM），不是求平均",
    "rank {rank}: the bias is missing from the output: add it once, after the all-reduce":
        "rank {rank}：输出里缺了 bias：在 all-reduce 之后加一次",
    "the output": "输出",
    "the summed product (before the bias, which is right)": "求和后的乘积（加 bias 之前；bias 本身是对的）",
    "rank {rank}: {what} is {factor}. Sum the partial products with one all-reduce "
    "(ReduceOp.SUM), then add the bias once":
        "rank {rank}：{what}是{factor}。用一次 all-reduce（ReduceOp.SUM）对部分积求和，再加一次 bias",
    "rank {rank}: forward differs from nn.Linear on one device by {gap:.3g}":
        "rank {rank}：forward 与单卡上的 nn.Linear 相差 {gap:.3g}",
    "rank {rank}: backward returned no gradient for the input shard (first return value)":
        "rank {rank}：backward 没有返回输入分片的梯度（第一个返回值）",
    "rank {rank}: the input gradient was all-reduced in backward; in a row-parallel layer rank "
    "r's input slice gets grad_y @ W_r alone (the sum belongs to forward)":
        "rank {rank}：输入梯度在 backward 里做了 all-reduce；行切分的层里，rank r 的输入切片只得到 "
        "grad_y @ W_r（求和属于 forward）",
    "rank {rank}: the input gradient is {factor}. Rank r's input slice gets grad_y @ W_r as it "
    "is: no collective, no division":
        "rank {rank}：输入梯度是{factor}。rank r 的输入切片直接得到 grad_y @ W_r：不做集合通信，也不做除法",
    "rank {rank}: input gradient differs by {gap:.3g} (expected grad_y @ weight_shard)":
        "rank {rank}：输入梯度相差 {gap:.3g}（应为 grad_y @ weight_shard）",
    "rank {rank}: backward returned no gradient for the weight shard":
        "rank {rank}：backward 没有返回权重分片的梯度",
    "rank {rank}: the weight gradient was all-reduced; each rank's columns get grad_y^T x_r from "
    "its own input slice, no collective":
        "rank {rank}：权重梯度做了 all-reduce；每个 rank 的那几列由它自己的输入切片得到 grad_y^T x_r，"
        "不需要集合通信",
    "rank {rank}: the weight gradient is {factor}. Each rank's columns get grad_y^T x_r from its "
    "own input slice: no collective, no division":
        "rank {rank}：权重梯度是{factor}。每个 rank 的那几列由它自己的输入切片得到 grad_y^T x_r："
        "不做集合通信，也不做除法",
    "rank {rank}: weight gradient differs (shape {got}, expected {want}; grad_y^T x_r summed over "
    "batch and sequence)":
        "rank {rank}：权重梯度不对（形状 {got}，应为 {want}；grad_y^T x_r 在 batch 和序列维上求和）",
    "rank {rank}: backward returned no gradient for the bias (grad_y summed over batch and "
    "sequence)":
        "rank {rank}：backward 没有返回 bias 的梯度（grad_y 在 batch 和序列维上求和）",
    "rank {rank}: bias gradient is {ratio}; it is grad_y summed over batch and sequence, whole on "
    "every rank (no division, no all-reduce)":
        "rank {rank}：bias 梯度是{ratio}；它是 grad_y 在 batch 和序列维上的和，每个 rank 上都是完整的"
        "（不做除法，也不做 all-reduce）",
    "needs a cluster of 2 or 4 ranks, this one has {n}": "需要 2 个或 4 个 rank 的集群，这个集群有 {n} 个",
    "{n} ranks: output and the gradients of input shard, weight shard and bias equal nn.Linear on "
    "one device":
        "{n} 个 rank：输出以及输入分片、权重分片和 bias 的梯度都与单卡上的 nn.Linear 一致",

    # -- notebook 06: errors and the figure of labkit/tp ---------------------------------------
    "{what} ({n}) does not divide by the tensor-parallel degree ({t}): {n} / {t} = {per:.2f} per "
    "rank. Tensor parallelism splits it into equal parts: pick a TP degree among the divisors of "
    "{n}, or pad it":
        "{what}（{n}）不能被张量并行度（{t}）整除：每个 rank 分到 {n} / {t} = {per:.2f}。张量并行把它"
        "等分：从 {n} 的约数中选 TP 度，或者先补齐（pad）",
    "{name} outputs": "{name} 的输出维",
    "{name} inputs": "{name} 的输入维",
    "number of attention heads": "注意力头数",
    "number of query heads": "query 头数",
    "number of K/V heads": "K/V 头数",
    "vocabulary size": "词表大小",
    "MLP hidden size (fc)": "MLP 隐藏层宽度（fc）",
    "MLP hidden size (fc_out)": "MLP 隐藏层宽度（fc_out）",
    "attention width (qkv)": "注意力宽度（qkv）",
    "attention width (proj)": "注意力宽度（proj）",
    "the TP degree ({t}) exceeds the K/V heads ({kv}) but is not a multiple of them: each K/V "
    "head must be copied to the same number of ranks; pick t in {choices}":
        "TP 度（{t}）超过了 K/V 头数（{kv}），却不是它的整数倍：每个 K/V 头必须复制到同样多的 rank 上；"
        "从 {choices} 中选 t",
    "sequence length {s} does not divide by the TP degree {t}: sequence parallelism gives each "
    "rank s / t = {per:.2f} positions; pick s divisible by {t}":
        "序列长度 {s} 不能被 TP 度 {t} 整除：序列并行给每个 rank 分 s / t = {per:.2f} 个位置；"
        "选一个能被 {t} 整除的 s",
    "{what} (measured)": "{what}（实测）",
    "logits": "logits",
    "saved by the loss": "loss 为反向保存的",
    "MiB on this rank": "本 rank 上的 MiB",
    "one device": "单卡",
    "gathered, then cross-entropy": "先 gather 再算交叉熵",
    "loss parallel": "loss 并行",
    "logits and what the loss keeps, rank 0 of 4 (N = 512, V = 4,096)":
        "logits 与 loss 保存的内容，4 个 rank 中的 rank 0（N = 512，V = 4,096）",
    # -- notebook 06: column headers of the tables (labkit.tables.Table translates them) -------
    "max abs difference from one device": "与单卡的最大绝对差",
    "all-reduces": "all-reduce 次数",
    "sent by rank 0 (measured)": "rank 0 发送（实测）",
    "ratio": "比值",
    "TP sends": "TP 发送",
    "DP sends": "DP 发送",
    "micro-batches at which TP overtakes DP": "TP 超过 DP 时的 micro-batch 数",
    "forward sent": "前向发送",
    "backward sent": "反向发送",
    "x activation": "x 激活",
    "kept for backward (measured)": "为反向保存的（实测）",
    "Korthikanti (no scores)": "Korthikanti 公式（不含注意力分数）",
    "measured / formula": "实测 / 公式",
    "collectives per layer, forward + backward": "每层的集合通信（前向 + 反向）",
    "output and input grad: max diff from one device": "输出与输入梯度：与单卡的最大差",
    "sent by rank 0": "rank 0 发送",
    "x the activation": "x 激活",
    "x hand-written TP": "x 手写 TP",
    "logits held (measured)": "持有的 logits（实测）",
    "formula (logit-sized part)": "公式（logits 大小的部分）",
    "logits held per rank": "每个 rank 持有的 logits",
    "kept for backward per rank": "每个 rank 为反向保存的",
    "loss: diff from one device": "loss：与单卡之差",
    "logits grad: max diff": "logits 梯度：最大差",
    "collectives, forward + backward": "集合通信（前向 + 反向）",
    "K/V heads": "K/V 头数",
    "copies of each": "每个头的副本数",
    "copies' gradients": "副本的梯度",
    "all-reduces added": "增加的 all-reduce",
    "output, input and q grads: max diff": "输出、输入与 q 的梯度：最大差",
    "k, v grads: max diff": "k、v 的梯度：最大差",
    "measured on 4 ranks": "在 4 个 rank 上实测",
    "here": "本次",
    "expected": "预期",
    # -- notebook 06: what TP divides on a rank (labkit/tp/split.py) --
    "FLOPs (fwd + bwd)": "FLOPs（前向 + 反向）",
    "one device / t": "单设备 / t",
    "weights split": "切分的权重",
    "one device's split / t": "单设备的切分部分 / t",
    "replicated": "复制的",
}
