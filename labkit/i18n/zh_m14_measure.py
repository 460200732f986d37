"""Chinese catalog: notebook 14, section 5 (the capstone's step measured: labkit/capstone/measure_plots.py).
Merged by labkit.i18n.zh (PARTS)."""

MESSAGES = {
    "{dim} {what}, stage {stage} (ranks {ranks}): counted {calls} calls, {got} B; formula {fc} calls, {fb} B":
        "{dim} {what}，阶段 {stage}（rank {ranks}）：计数 {calls} 次调用，{got} B；公式 {fc} 次调用，{fb} B",
    "activations all-reduce": "激活值 all-reduce",
    "gradients all-reduce": "梯度 all-reduce",
    "activations/gradients sent": "发送的激活值/梯度",
    "activations/gradients received": "接收的激活值/梯度",
    "scalars all-reduce (norm, loss)": "标量 all-reduce（范数、损失）",
    "dim": "维度",
    "what": "内容",
    "stage": "阶段",
    "calls": "调用次数",
    "payload B (counted)": "有效载荷 B（计数）",
    "payload B (formula)": "有效载荷 B（公式）",
    "sent B (ring)": "发送 B（环）",
    "planner sent B": "规划器发送 B",
    "bytes per rank in one step, dp {dp} x pp {pp} x tp {tp}": "一步中每个 rank 的字节数，dp {dp} x pp {pp} x tp {tp}",
    "sent: what the ring formula puts on the wire for the counted payload (all-reduce over n ranks: "
    "2 (n-1)/n of it); the planner divides the parameters evenly over the stages, the trainer keeps "
    "the embeddings on the first and the head on the last":
        "发送：环形公式对计数到的有效载荷放到线路上的字节数（n 个 rank 上的 all-reduce：它的 2 (n-1)/n）；"
        "规划器把参数平均分到各个阶段，训练器把嵌入放在第一个阶段，把输出头放在最后一个阶段",
    "{cat}, stage {stage}: counted {got} B on ranks {ranks}; formula {want} B":
        "{cat}，阶段 {stage}：在 rank {ranks} 上计数 {got} B；公式 {want} B",
    "parameters": "参数量",
    "gradients": "梯度",
    "optimizer states": "优化器状态",
    "activations (saved, all micro-batches)": "激活值（保存的，所有 micro-batch）",
    "category": "类别",
    "counted B": "计数 B",
    "formula B": "公式 B",
    "planner B": "规划器 B",
    "memory per rank by category, dp {dp} x pp {pp} x tp {tp}": "每个 rank 按类别的内存，dp {dp} x pp {pp} x tp {tp}",
    "plain SGD keeps no optimizer state; the activations are the tensors autograd saved for backward "
    "over the step's micro-batches, shown without a formula (the planner's is for 16-bit training)":
        "普通的 SGD 不保存优化器状态；激活值是 autograd 在这一步的各个 micro-batch 中为反向保存的张量，"
        "不给公式（规划器的公式是针对 16 位训练的）",
    "rank {r} (dp {d}, pp {p}, tp {t})": "rank {r}（dp {d}，pp {p}，tp {t}）",
    "time since the step's first action (ms), measured": "从这一步的第一个动作起的时间（毫秒），测得",
    "one training step on {n} ranks": "{n} 个 rank 上的一个训练步",
    "forward (number: micro-batch)": "前向（数字：micro-batch）",
    "backward": "反向",
    "TP all-reduce (activations)": "TP all-reduce（激活值）",
    "waiting for a pipeline neighbour": "等待流水线邻居",
    "DP all-reduce (gradients; loss)": "DP all-reduce（梯度；损失）",
    "PP all-reduce (norm, loss)": "PP all-reduce（范数、损失）",
}
MESSAGES.update({
    "layout": "布局",
    "tokens/s here, vs the first": "这里的 token/秒，相对第一种",
    "order here": "这里的顺序",
    "planner on 8 H100, vs its best": "规划器在 8 块 H100 上，相对它的最佳",
    "planner's order": "规划器的顺序",
    "tokens per second per layout, {n} ranks": "每种布局每秒处理的 token 数，{n} 个 rank",
    "here: 8 ranks share this machine's CPU cores, so a layout's speed is how its ranks take turns "
    "on them, not how fast its links are; the planner counts GPUs that compute in parallel and links "
    "of set bandwidths. Only a machine with 8 GPUs can say which order holds there":
        "这里：8 个 rank 共用这台机器的 CPU 核心，所以一种布局的速度取决于它的 rank 怎样轮流使用这些核心，"
        "而不是它的链路有多快；规划器算的是并行计算的 GPU 和带宽给定的链路。只有一台有 8 块 GPU 的机器才能说出那里成立的是哪种顺序",
})
