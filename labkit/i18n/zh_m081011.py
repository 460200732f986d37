"""Chinese catalog, part: what the library prints and draws for notebooks 08, 10 and 11 (the
planner, the throughput diagnosis, the pitfalls and the doctor) and the tables of 01, 03, 04
that were still English. Merged into `labkit.i18n.zh.MESSAGES`, same rules: the English text
with its format fields is the key; pass / FAIL / ok: / MISS: and checker names stay English."""

MESSAGES = {
    # -- notebook 08: the parallel grid (labkit/parallel_dims.py) ------------------------------
    "{name} must be a whole number >= 1, got {v!r}": "{name} 必须是 >= 1 的整数，收到的是 {v!r}",
    "{dims} = {n} != world size ({world_size}); the degrees must multiply to the number of GPUs":
        "{dims} = {n} != world size（{world_size}）；各维并行度的乘积必须等于卡数",
    "tp({tp}) > GPUs per node ({g}): a TP group would cross the slow link between nodes, and TP "
    "talks inside every layer; keep tp <= {g}":
        "tp({tp}) > 每节点卡数（{g}）：一个 TP 组会跨过节点间的慢速链路，而 TP 每一层都要通信；"
        "请保持 tp <= {g}",
    "GPUs per node ({g}) is not a multiple of tp({tp}): some TP group would straddle two nodes; "
    "pick tp among the divisors of {g}":
        "每节点卡数（{g}）不是 tp({tp}) 的倍数：有的 TP 组会横跨两个节点；请从 {g} 的因数中选 tp",
    "layers ({layers}) not divisible by pp({pp}): {layers} / {pp} = {q:.2f} layers per stage; "
    "pick pp among the divisors of {layers}":
        "层数（{layers}）不能被 pp({pp}) 整除：{layers} / {pp} = 每个 stage {q:.2f} 层；"
        "请从 {layers} 的因数中选 pp",
    "heads ({heads}) not divisible by tp({tp}): {heads} / {tp} = {q:.2f} heads per rank; TP "
    "splits attention by whole heads":
        "注意力头数（{heads}）不能被 tp({tp}) 整除：{heads} / {tp} = 每个 rank {q:.2f} 个头；"
        "TP 按整头切分注意力",
    "hidden ({hidden}) not divisible by tp({tp}): {hidden} / {tp} = {q:.2f} columns per rank":
        "hidden（{hidden}）不能被 tp({tp}) 整除：{hidden} / {tp} = 每个 rank {q:.2f} 列",
    "sequence ({seq}) not divisible by 2 x cp({cp}) = {two_cp}: the causal load-balanced (zig-zag) "
    "split gives each rank two of {two_cp} equal chunks":
        "序列长度（{seq}）不能被 2 x cp({cp}) = {two_cp} 整除：因果注意力的负载均衡（zig-zag）"
        "切分让每个 rank 拿 {two_cp} 个等长块中的两块",
    "ep({ep}) does not divide cp({cp}) x dp({dp}) = {cd}: expert parallelism re-cuts the CP x DP "
    "ranks, so pick ep among the divisors of {cd}":
        "ep({ep}) 不能整除 cp({cp}) x dp({dp}) = {cd}：专家并行是把 CP x DP 的 rank 重新切分，"
        "所以请从 {cd} 的因数中选 ep",
    "experts ({experts}) not divisible by ep({ep}): {experts} / {ep} = {q:.2f} experts per rank; "
    "pick ep among the divisors of {experts}":
        "专家数（{experts}）不能被 ep({ep}) 整除：{experts} / {ep} = 每个 rank {q:.2f} 个专家；"
        "请从 {experts} 的因数中选 ep",
    "invalid parallel layout:": "并行布局无效：",
    "rank {rank} is outside 0..{last} (dp {dp} x pp {pp} x tp {tp} x cp {cp})":
        "rank {rank} 不在 0..{last} 之内（dp {dp} x pp {pp} x tp {tp} x cp {cp}）",
    "{d} coordinate {v} is outside 0..{last}": "{d} 坐标 {v} 不在 0..{last} 之内",
    " (experts: ep {ep} x edp {edp})": "（专家：ep {ep} x edp {edp}）",
    "{n} GPUs = dp {dp} x pp {pp} x tp {tp}{extra} on {nodes} node(s) of {g}; order {order} "
    "(fastest first)":
        "{n} 卡 = dp {dp} x pp {pp} x tp {tp}{extra}，分布在 {nodes} 个节点上（每节点 {g} 卡）；"
        "顺序 {order}（变化最快的在前）",
    "crosses nodes": "跨节点",
    "inside a node": "节点内",
    "  {d}: {k} groups of {size}, e.g. {first} ({where})": "  {d}：{k} 组，每组 {size} 个，例如 {first}（{where}）",
    "layout needs {n} ranks (dp {dp} x pp {pp} x tp {tp} x cp {cp}), the cluster has {have}; "
    "start it with that many ranks":
        "该布局需要 {n} 个 rank（dp {dp} x pp {pp} x tp {tp} x cp {cp}），集群只有 {have} 个；"
        "请用这么多 rank 启动集群",
    # -- notebook 08: the planner (labkit/plan/planner.py, dims.py, traffic.py) ----------------
    "{layout} ({sharding}), checkpointing {ck}, micro-batch {mb}: {gb:.1f} GB/GPU, step {s:.2f} s, "
    "MFU {mfu:.0%}":
        "{layout}（{sharding}），激活重计算 {ck}，micro-batch {mb}：每卡 {gb:.1f} GB，"
        "每 step {s:.2f} s，MFU {mfu:.0%}",
    "hybrid sharding (ZeRO-3 in the node, replicas across nodes)": "混合分片（节点内 ZeRO-3，节点间保留副本）",
    "none": "无",
    "global batch {gb} does not split into dp {dp} x micro-batch {mb} x a whole number of "
    "micro-batches":
        "全局 batch {gb} 无法拆成 dp {dp} x micro-batch {mb} x 整数个 micro-batch",
    "ep {ep} must divide the experts ({experts}) and cp x dp ({cp} x {dp} = {cd})":
        "ep {ep} 必须能整除专家数（{experts}）和 cp x dp（{cp} x {dp} = {cd}）",
    "{name} on {nodes} node(s) x {g} {gpu} ({gb:g} GB, {tflops:g} TFLOP/s); a step is one global "
    "batch of {batch:,} sequences x {seq:,} tokens = {mtok:.1f}M tokens":
        "{name}，{nodes} 个节点 x 每节点 {g} 张 {gpu}（{gb:g} GB，{tflops:g} TFLOP/s）；一个 step "
        "是一个全局 batch：{batch:,} 条序列 x {seq:,} 个 token = {mtok:.1f}M token",
    "nothing fits": "没有能装下的布局",
    "memory/GPU: model state {state:.1f} + activations {act:.1f} + gathered layers {gathered:.1f} GB; "
    "traffic/GPU/step: {traffic} GB; bubble {bubble:.1%}":
        "每卡显存：模型状态 {state:.1f} + 激活值 {act:.1f} + 收集来的层 {gathered:.1f} GB；"
        "每卡每 step 通信量：{traffic} GB；流水线气泡 {bubble:.1%}",
    "1. one GPU?": "1. 单卡装得下吗？",
    "8-bit optimizer": "8-bit 优化器",
    "2. data parallel": "2. 数据并行",
    "2. DP / ZeRO / FSDP": "2. DP / ZeRO / FSDP",
    "3. checkpointing": "3. 激活重计算",
    "4. TP inside the node": "4. 节点内 TP",
    "5. PP across nodes": "5. 跨节点 PP",
    "6. hybrid sharding": "6. 混合分片",
    "7. CP for long sequences": "7. 长序列用 CP",
    "8. EP for experts": "8. 专家用 EP",
    "choice": "选择",
    "model state {state:.0f} GB (16 B/param, mixed-precision Adam) + activations {act:.1f} GB at "
    "micro-batch 1 = {total:.0f} GB vs {usable:.0f} GB usable: {fit}":
        "模型状态 {state:.0f} GB（每参数 16 B，混合精度 Adam）+ micro-batch 1 时的激活值 {act:.1f} GB "
        "= {total:.0f} GB，可用 {usable:.0f} GB：{fit}",
    "fits": "装得下",
    "does not fit": "装不下",
    "nothing fits with fp32 Adam states; ": "用 fp32 的 Adam 状态什么都装不下；",
    "8-bit Adam (m, v in 1 byte) makes it fit": "8-bit Adam（m、v 各占 1 字节）能装下",
    "not even with 8-bit Adam": "用 8-bit Adam 也装不下",
    "one GPU: nothing to replicate": "只有一张卡：没有可复制的副本",
    "DDP fits ({short}); the notes' 'fits: no parallelism' is for one GPU: with more GPUs practice "
    "replicates the model for throughput":
        "DDP 装得下（{short}）；讲义里“装得下就不并行”说的是单卡：卡多了，实践中会复制模型来提高吞吐",
    "DDP does not fit (every GPU holds all 16 B/param)": "DDP 装不下（每张卡都存全部的每参数 16 B）",
    "; best sharded: {short}": "；最好的分片方案：{short}",
    "; ZeRO over all GPUs does not fit": "；在所有卡上做 ZeRO 也装不下",
    "{ck}: activations {act:.1f} GB/GPU (without: {without:.1f} GB, {fit})":
        "{ck}：激活值每卡 {act:.1f} GB（不重计算：{without:.1f} GB，{fit}）",
    "; the only setting that fits": "；唯一装得下的设置",
    "without TP nothing fits": "不用 TP 什么都装不下",
    "best without TP: {short}": "不用 TP 时最好的是：{short}",
    "TP {tp} keeps its {calls} all-reduces per step on NVLink and divides weights, activations and DP "
    "traffic by {tp}; {why}":
        "TP {tp} 让每 step 的 {calls} 次 all-reduce 都走 NVLink，并把权重、激活值和 DP 通信量都除以 {tp}；{why}",
    "not needed: the layers fit whole": "不需要：整层放得下",
    " (best with TP: {short})": "（用 TP 时最好的是：{short}）",
    "PP {pp}: bubble {bubble:.1%} with {m} micro-batches; ": "PP {pp}：{m} 个 micro-batch 时流水线气泡 {bubble:.1%}；",
    "without PP nothing fits": "不用 PP 什么都装不下",
    "best without PP: {short}": "不用 PP 时最好的是：{short}",
    "not needed: the layers fit on each GPU (or its TP group)": "不需要：各层在每张卡（或它的 TP 组）上放得下",
    "chosen: {short}": "已选中：{short}",
    "best hybrid: {short}": "最好的混合分片：{short}",
    "does not fit (a node's GPUs alone cannot hold the model states)": "装不下（单个节点的卡放不下模型状态）",
    "the fastest layout that fits (among those within 2 % of it, the simplest)":
        "装得下的布局中最快的（与它相差 2 % 以内的布局里选最简单的）",
    "not tried: a sequence of {seq:,} tokens over 2 ranks would leave each under {least:,}":
        "没有尝试：{seq:,} 个 token 的序列分给 2 个 rank，每个不到 {least:,}",
    "CP {cp}: each GPU holds {mine:,} of the {seq:,} tokens, activations {act:.1f} GB, K/V "
    "all-gathers {kv:.1f} GB/step; ":
        "CP {cp}：每张卡持有 {seq:,} 个 token 中的 {mine:,} 个，激活值 {act:.1f} GB，"
        "K/V 的 all-gather 每 step {kv:.1f} GB；",
    "without CP nothing fits": "不用 CP 什么都装不下",
    "best without CP: {short}": "不用 CP 时最好的是：{short}",
    "not chosen": "未选用",
    "; best with CP: {short}": "；用 CP 时最好的是：{short}",
    ": nothing with CP fits": "：用 CP 的布局都装不下",
    "EP {ep}: each GPU holds {mine} of {experts} experts per layer, all-to-alls {a2a:.1f} GB/step "
    "({calls} calls); ":
        "EP {ep}：每层 {experts} 个专家中每张卡持有 {mine} 个，all-to-all 每 step {a2a:.1f} GB（{calls} 次调用）；",
    "without EP nothing fits": "不用 EP 什么都装不下",
    "best without EP: {short}": "不用 EP 时最好的是：{short}",
    "; best with EP: {short}": "；用 EP 时最好的是：{short}",
    ": nothing with EP fits": "：用 EP 的布局都装不下",
    "{ranked} by bytes per GPU; the notes' TP > PP > DP holds here":
        "按每卡字节数 {ranked}；讲义的 TP > PP > DP 在这里成立",
    "{ranked} by bytes per GPU; the notes' TP > PP > DP does not hold here (by calls per step DP is "
    "still fewest)":
        "按每卡字节数 {ranked}；讲义的 TP > PP > DP 在这里不成立（按每 step 的调用次数，DP 仍然最少）",
    "cp {c} > 1: give heads (and kv_heads) so the K/V blocks can be sized":
        "cp {c} > 1：请给出 heads（和 kv_heads），才能算出 K/V 块的大小",

    # -- notebook 08: the layout figure (labkit/plan/draw.py) ----------------------------------
    "node {node}": "节点 {node}",
    "inside each node": "在各节点内",
    " (colour = group, number = global rank)": "（颜色 = 组，数字 = 全局 rank）",
    "colour = group, number = global rank": "颜色 = 组，数字 = 全局 rank",
    "{groups}: {k} of {size} ranks, {where}{key}": "{groups}：{k} 组，每组 {size} 个 rank，{where}{key}",
    "TP groups": "TP 组",
    "PP groups (pipelines)": "PP 组（流水线）",
    "DP groups (replicas)": "DP 组（副本）",
    "dp {dp} x pp {pp} x tp {tp} = {n} GPUs, order {order} (fastest first)":
        "dp {dp} x pp {pp} x tp {tp} = {n} 卡，顺序 {order}（变化最快的在前）",

    # -- notebook 08: the planner's form (labkit/plan/form.py) ---------------------------------
    "<b>{name}</b> on {nodes} x {g} {gpu}": "<b>{name}</b>，{nodes} x {g} 张 {gpu}",
    "branch": "分支",
    "reason": "理由",
    "<p><b>Nothing fits</b> on this hardware: add GPUs or memory.</p>":
        "<p>在这套硬件上<b>什么都装不下</b>：请加卡或加显存。</p>",
    "layout": "布局",
    "sharding": "分片",
    "checkpointing": "激活重计算",
    "micro-batch x count": "micro-batch x 个数",
    "memory / GPU": "每卡显存",
    "{gb:.1f} GB (state {state:.1f}, activations {act:.1f}, gathered {gathered:.1f}) of {cap:g}":
        "{gb:.1f} GB（模型状态 {state:.1f}，激活值 {act:.1f}，收集来的层 {gathered:.1f}），共 {cap:g}",
    "traffic / GPU / step": "每卡每 step 通信量",
    "bubble": "流水线气泡",
    "step time": "step 时间",
    "{s:.2f} s per global batch of {batch:,} x {seq:,} tokens":
        "每个全局 batch（{batch:,} x {seq:,} token）{s:.2f} s",
    "plan": "方案",
    "model": "模型",
    "GPUs/node": "每节点卡数",
    "nodes": "节点数",
    "network GB/s": "网络 GB/s",
    "<p><b>Cannot plan:</b> {error}</p>": "<p><b>无法规划：</b>{error}</p>",
    # -- notebook 10: the diagnosis order (labkit/diagnose/verdict.py, steps.py, data.py) -------
    "Phases.{name} must be seconds >= 0, got {v!r}": "Phases.{name} 必须是 >= 0 的秒数，收到的是 {v!r}",
    "diagnose needs the phase times of at least one rank": "diagnose 至少需要一个 rank 的各阶段耗时",
    "waiting for data": "等数据",
    "communication": "通信",
    "waiting for a slower rank": "等较慢的 rank",
    "utilisation (compute share of the step)": "利用率（step 中计算所占的比例）",
    "{busy:.0%} computing (low means below {low:.0%})": "{busy:.0%} 在计算（低于 {low:.0%} 算低）",
    "; the rest is mostly {cause} (data {data:.0%}, waiting for other ranks {wait:.0%}, communication "
    "{comm:.0%})":
        "；其余时间主要在{cause}（数据 {data:.0%}，等其他 rank {wait:.0%}，通信 {comm:.0%}）",
    "communication share": "通信占比",
    "{comm:.0%} of the step (notes: above {line:.0%}, cut communication: sharding strategy, overlap, "
    "bigger buckets, accumulation)":
        "占 step 的 {comm:.0%}（讲义：超过 {line:.0%} 就要减少通信：分片策略、通信与计算重叠、"
        "更大的桶、梯度累积）",
    "memory peak against the budget": "显存峰值与预算之比",
    "not measured (give peak_bytes and budget_bytes)": "未测量（请给出 peak_bytes 和 budget_bytes）",
    "peak {peak:.1f} MiB of {budget:.1f} MiB = {frac:.0%} (near the limit above {near:.0%}: "
    "checkpointing, smaller micro-batch)":
        "峰值 {peak:.1f} MiB / {budget:.1f} MiB = {frac:.0%}（超过 {near:.0%} 就接近上限："
        "激活重计算、更小的 micro-batch）",
    "data loader keeps up": "数据加载跟得上",
    "waiting for the next batch {data:.0%} of the step (starved above {line:.0%}: the workers are "
    "saturated, add workers or prefetch)":
        "等下一个 batch 占 step 的 {data:.0%}（超过 {line:.0%} 就是数据供给不足：worker 已经饱和，"
        "请加 worker 或预取）",
    "bottleneck: {cause}": "瓶颈：{cause}",
    "scenario must be one of {known}, got {name!r}": "scenario 必须是 {known} 之一，收到的是 {name!r}",
    "by must be 'rank_and_worker' or 'rank', got {by!r}": "by 必须是 'rank_and_worker' 或 'rank'，收到的是 {by!r}",

    # -- notebook 10: the figures (labkit/diagnose/draw.py) ------------------------------------
    "data wait": "等数据",
    "forward": "前向",
    "backward": "反向",
    "waiting for other ranks": "等其他 rank",
    "optimizer": "优化器",
    "{name}, rank {r}": "{name}，rank {r}",
    "slow data": "数据慢",
    "memory": "显存",
    "data": "数据",
    "imbalance": "负载不均",
    "30 % (the notes' communication line)": "30 %（讲义的通信占比红线）",
    "share of the step (%); step time at the right": "占 step 的比例 (%)；右侧是 step 时间",
    "share of one training step (%); the time per step is printed at the right":
        "占一个训练 step 的比例 (%)；每个 step 的时间印在右侧",
    "Where each rank's step goes": "每个 rank 的 step 时间花在哪里",
    "ideal: max(workers, 1) / {ms:.0f} ms": "理想值：max(workers, 1) / {ms:.0f} ms",
    "items per second": "每秒样本数",
    "Workers overlap items that wait (ratio to the first bar)": "多个 worker 让等待的样本互相重叠（相对第一根柱子的倍数）",

    # -- notebook 10: the tuning knobs (labkit/diagnose/knobs.py) ------------------------------
    "knob": "参数",
    "the notes": "讲义",
    "what it trades": "用什么换什么",
    "where the course measures it": "课程在哪里测量它",
    "DDP gradient bucket size (default 25)": "DDP 梯度分桶大小（默认 25）",
    "big buckets start their all-reduce late (less overlap); small ones pay a start-up cost each":
        "大桶的 all-reduce 开始得晚（重叠少）；小桶每个都要付一次启动开销",
    "03 DDP: bucketed DDP, the overlap timeline and torch DDP's bucket sizes":
        "03 DDP：分桶 DDP、重叠时间线和 torch DDP 的桶大小",
    "gradient accumulation": "梯度累积",
    "a large batch from small ones": "用小 batch 凑出大 batch",
    "memory of one micro-batch, fewer optimizer steps; DDP's no_sync sends once per step, ZeRO-2/3 "
    "and FSDP reduce-scatter every micro-batch":
        "只占一个 micro-batch 的显存，优化器 step 更少；DDP 的 no_sync 每 step 只通信一次，"
        "ZeRO-2/3 和 FSDP 每个 micro-batch 都要 reduce-scatter",
    "03 DDP (equal gradients, no_sync); 09 memory tricks (memory against step time)":
        "03 DDP（梯度相等、no_sync）；09 显存优化（显存与 step 时间的取舍）",
    "activation checkpointing": "激活重计算",
    "trade compute for activation memory": "用计算换激活值显存",
    "about one extra forward per step for activations cut to layer inputs":
        "每 step 大约多一次前向，换来激活值只保留每层的输入",
    "01 memory (Korthikanti formulas); 09 memory tricks (measured)": "01 显存（Korthikanti 公式）；09 显存优化（实测）",
    "optimizer state on the CPU (slow, saves memory)": "优化器状态放到 CPU（慢，但省显存）",
    "device memory against host-device copies every step": "用每 step 的主机-设备拷贝换显存",
    "09 memory tricks; 05 FSDP (CPUOffload)": "09 显存优化；05 FSDP（CPUOffload）",
    "FSDP communication scheduling": "FSDP 的通信调度",
    "prefetching the next layer's all-gather overlaps it with compute but holds two layers; "
    "limit_all_gathers caps the in-flight gathers to save memory":
        "预取下一层的 all-gather 能与计算重叠，但要同时持有两层；limit_all_gathers 限制同时进行的 "
        "gather 数以省显存",
    "05 FSDP (forward/backward prefetch)": "05 FSDP（前向/反向预取）",
    "NCCL's environment variables": "NCCL 的环境变量",
    "NCCL_IB_DISABLE=1 forbids InfiniBand (falls back to TCP sockets: much slower across nodes); "
    "NCCL_SOCKET_IFNAME picks the network interface NCCL's sockets use":
        "NCCL_IB_DISABLE=1 禁用 InfiniBand（退回 TCP socket：跨节点慢得多）；NCCL_SOCKET_IFNAME "
        "选择 NCCL 的 socket 使用的网卡",
    "needs NCCL and a network: not measurable on CPU ranks; set through Cluster(env={...}), 11 "
    "pitfalls shows the debug variables":
        "需要 NCCL 和网络：在 CPU rank 上无法测量；可通过 Cluster(env={...}) 设置，11 常见陷阱展示了调试用的变量",
    "the data bottleneck: more workers, streaming": "数据瓶颈：更多 worker、流式读取",
    "workers overlap slow reads; prefetch_factor batches queued per worker; pinned memory makes "
    "host-to-GPU copies asynchronous (GPU only)":
        "worker 让慢速读取互相重叠；prefetch_factor 是每个 worker 排队的 batch 数；锁页内存让主机到 GPU "
        "的拷贝异步进行（仅 GPU）",
    "10 throughput and data (this notebook: workers swept)": "10 吞吐与数据（本 notebook: 扫描 worker 数）",
    # -- notebook 11: the pitfalls (labkit/doctor/pitfalls.py) ---------------------------------
    "ranks {ranks} all use {device}: call torch.cuda.set_device(local_rank) before creating "
    "tensors or the process group":
        "rank {ranks} 都在用 {device}：请在创建张量或进程组之前调用 torch.cuda.set_device(local_rank)",
    "rank {rank} uses {device} but its LOCAL_RANK is {local}: call torch.cuda.set_device(local_rank) "
    "before creating tensors or the process group":
        "rank {rank} 在用 {device}，但它的 LOCAL_RANK 是 {local}：请在创建张量或进程组之前调用 "
        "torch.cuda.set_device(local_rank)",
    "{n} ranks, each on its own device or on the CPU": "{n} 个 rank，各自在自己的设备上或在 CPU 上",
    "{k} items evaluated twice (padding: {first}); mask the padded positions or use drop_last only "
    "for training":
        "{k} 个样本被评估了两次（填充：{first}）；请把填充的位置遮掉，drop_last 只在训练时用",
    "{k} item evaluated twice (padding: {first}); mask the padded positions or use drop_last only "
    "for training":
        "{k} 个样本被评估了两次（填充：{first}）；请把填充的位置遮掉，drop_last 只在训练时用",
    "{k} items never evaluated ({first})": "{k} 个样本从未被评估（{first}）",
    "{k} item never evaluated ({first})": "{k} 个样本从未被评估（{first}）",
    "the order changes between evaluations: use shuffle=False for validation":
        "每次评估的顺序都不同：验证时请用 shuffle=False",
    "; ": "；",
    "{n} items, each evaluated once, in the same order every time": "{n} 个样本，每个只评估一次，每次顺序相同",
    "ranks hold BatchNorm statistics of different sizes": "各 rank 的 BatchNorm 统计量大小不同",
    "BatchNorm statistics differ across ranks by up to {gap:.3g}: each rank normalised with its own "
    "batch; use SyncBatchNorm (GPU) or all-reduce the batch statistics, or LayerNorm":
        "各 rank 的 BatchNorm 统计量相差最多 {gap:.3g}：每个 rank 都用自己的 batch 做归一化；"
        "请用 SyncBatchNorm（GPU）、对 batch 统计量做 all-reduce，或者改用 LayerNorm",
    "BatchNorm statistics equal on {n} ranks (within {tol:g})": "{n} 个 rank 上的 BatchNorm 统计量相等（误差 {tol:g} 以内）",
    "lr {lr:g} follows the {rule} rule for a global batch {k:g}x the base":
        "lr {lr:g} 符合 {rule} 规则（全局 batch 是基准的 {k:g} 倍）",
    "lr {lr:g} is above the linear rule ({linear:g}) for a global batch {k:g}x the base: expect "
    "divergence; use at most the linear rule, with warm-up":
        "lr {lr:g} 高于 linear 规则（{linear:g}），全局 batch 是基准的 {k:g} 倍：训练可能发散；"
        "最多用 linear 规则，并配合 warm-up",
    "lr {lr:g} is not scaled for a global batch {k:g}x the base ({base} -> {batch}): training is "
    "slow; linear rule {linear:g}, sqrt rule {sqrt:g}":
        "全局 batch 是基准的 {k:g} 倍（{base} -> {batch}），lr {lr:g} 却没有缩放：训练会很慢；"
        "linear 规则 {linear:g}，sqrt 规则 {sqrt:g}",
    "initial weights differ across ranks ({k} versions): seed the model identically or broadcast "
    "rank 0's weights (DDP does)":
        "各 rank 的初始权重不一致（{k} 个版本）：请用相同的种子初始化模型，或广播 rank 0 的权重（DDP 就是这样做的）",
    "sampler seeds differ ({seeds}): shards overlap and miss items; give DistributedSampler the same "
    "seed on every rank":
        "sampler 的种子不一致（{seeds}）：各分片会重叠、漏掉样本；请在每个 rank 上给 DistributedSampler 相同的种子",
    "dropout masks on a replicated activation differ inside the tensor-parallel group ({k} versions): "
    "the ranks' copies of it diverge; use the same seed on the group for replicated regions, and a "
    "per-rank generator only inside the sharded region":
        "张量并行组内，复制的激活值上的 dropout 掩码不一致（{k} 个版本）：各 rank 的副本会分叉；"
        "复制区域请在组内用同一个种子，只有切分区域内才用每个 rank 自己的生成器",
    "note: dropout masks are identical on every data-parallel rank; not a bug (each mask falls on "
    "different samples), though seeding dropout with the rank (seed + rank) is the usual choice":
        "注意：每个数据并行 rank 上的 dropout 掩码都相同；这不是 bug（每个掩码落在不同的样本上），"
        "不过通常的做法是用 rank 给 dropout 设种子（seed + rank）",
    "weights and sampler seeds match on every rank": "每个 rank 上的权重和 sampler 种子都一致",
    ", the tensor-parallel group's masks on replicated activations are identical":
        "，张量并行组在复制激活值上的掩码相同",
    ", dropout masks differ across data-parallel ranks": "，各数据并行 rank 的 dropout 掩码不同",
    "stage {s} takes {x:.2f}x the mean stage time; the others idle {idle:.0%} of the time: move "
    "layers off stage {s}":
        "stage {s} 耗时是各 stage 平均的 {x:.2f} 倍；其他 stage 有 {idle:.0%} 的时间空闲：请把一些层从 stage {s} 移走",
    "stages within {tol:.0%} of the mean (idle {idle:.0%})": "各 stage 与平均值相差不超过 {tol:.0%}（空闲 {idle:.0%}）",

    # -- notebook 11: the convergence checklist (labkit/doctor/checklist.py) -------------------
    "single-rank sanity": "单 rank 自检",
    "gradient norm": "梯度范数",
    "learning-rate rule": "学习率缩放规则",
    "seeds in sync": "种子一致",
    "loss {first:.2f} -> {last:.2f} in {steps} steps on one rank": "单个 rank 上 {steps} 步内 loss {first:.2f} -> {last:.2f}",
    ": it does not learn alone; fix the data or the model before scaling out":
        "：单独训练都学不会；扩展到多卡之前先修好数据或模型",
    "global gradient norm {norm:.3g}": "全局梯度范数 {norm:.3g}",
    " (above {max_norm:g} or not finite: clip it, lower the learning rate, check the loss scale)":
        "（超过 {max_norm:g} 或不是有限值：做梯度裁剪、降低学习率、检查 loss scale）",

    # -- notebook 08: gradient clipping on a 3D layout (labkit/clipping.py) --------------------
    "{layout} (rank {rank})": "{layout}（rank {rank}）",
    "the global gradient norm, right and with one piece missing (dashed: one process; green: equal "
    "to it, red: not)":
        "全局梯度范数：正确的，和少算一部分的（虚线：单进程；绿：与之相等，红：不等）",
    "one process": "单进程",
    "right": "正确",
    "no DP sum": "缺 DP 求和",
    "no TP sum": "缺 TP 求和",
    "no PP sum": "缺 PP 求和",
    "replicas counted t times": "副本被算了 t 次",
    "no EP sum": "缺 EP 求和",
    # -- notebook 04: DDP against ZeRO-3 on a slow link (labkit/zero/link_race.py) --
    "slow link ({rate:g} MB/s): ZeRO-3 / DDP step = {got:.2f}, the planner predicts {want:.2f} "
    "(within {tol:.0%}; ZeRO-3 sends 1.5x DDP's bytes)":
        "慢链路（{rate:g} MB/s）：ZeRO-3 / DDP 的 step = {got:.2f}，规划器预测 {want:.2f}"
        "（误差在 {tol:.0%} 以内；ZeRO-3 发送的字节是 DDP 的 1.5 倍）",
    "link": "链路",
    "ZeRO-3 / DDP step, measured": "ZeRO-3 / DDP 的 step，实测",
    # -- notebook 10: streaming against preloading (labkit/diagnose/data.py) --
    "streaming with {w} workers: first step {a:.1f}x sooner (bar {fa}, ideal {ia:g}x), whole pass "
    "{b:.2f}x shorter (bar {fb}, ideal {ib:g}x) than reading all {n} items first":
        "用 {w} 个 worker 流式读取：与先读完全部 {n} 条相比，第一步提前 {a:.1f} 倍（门槛 {fa}，理想 {ia:g} 倍），"
        "整遍缩短 {b:.2f} 倍（门槛 {fb}，理想 {ib:g} 倍）",
    "workers": "worker 数",
    "first step: preload / stream": "第一步：先读完 / 流式",
    "whole pass: preload / stream": "整遍：先读完 / 流式",
    # -- notebook 03: a call's start-up cost (labkit/ddp/bucket_cost.py) --
    "the same {mib:g} MiB in {many} calls took {share:.0f}x as long as in {few} (bar: {factor:g}x); "
    "one call's start-up cost is {per:.2f}x the time of the whole {mib:g} MiB in one call":
        "同样 {mib:g} MiB 分 {many} 次调用，耗时是 {few} 次调用的 {share:.0f} 倍（门槛：{factor:g} 倍）；"
        "一次调用的启动开销是一次调用传完整个 {mib:g} MiB 所需时间的 {per:.2f} 倍",
    "bucket cap": "桶大小上限",
    "calls": "调用次数",
    "time / one call's": "时间 / 一次调用的时间",
    "communication share above {t:.0%} on every rank: timers {a:.0%} to {b:.0%}, torch.profiler {c:.0%} to {d:.0%}":
        "每个 rank 上通信占比都高于 {t:.0%}：计时器 {a:.0%} 到 {b:.0%}，torch.profiler {c:.0%} 到 {d:.0%}",
    "dense counted on every EP rank": "稠密参数在每个 EP rank 上都算了",
    "summed over CP": "在 CP 上求了和",
    "tied embedding counted twice": "共享的嵌入算了两次",
    "clip_parity_ep on rank {rank}: it runs on 4 ranks with cp = 1 or 2, not {n} ranks and cp = {cp}: "
    "start labkit.Cluster(4)":
        "rank {rank} 上的 clip_parity_ep：它要在 4 个 rank 上运行，cp = 1 或 2，而不是 {n} 个 rank、cp = {cp}："
        "请启动 labkit.Cluster(4)",
    "tied_parity on rank {rank}: it runs on 4 ranks (DP 2 x PP 2), not {n}: start labkit.Cluster(4)":
        "rank {rank} 上的 tied_parity：它要在 4 个 rank 上运行（DP 2 x PP 2），而不是 {n} 个：请启动 labkit.Cluster(4)",
    # -- table headers and notes that notebooks 08 and 10 hand to labkit.Table (it translates
    #    each header, title and note through this catalog; the rows stay as the code made them) --
    "node": "节点",
    "dp x pp x tp, 8 GPUs/node": "dp x pp x tp，每节点 8 卡",
    "order": "顺序",
    "Llama 2 70B, 32 GPUs: dp x pp x tp": "Llama 2 70B，32 卡：dp x pp x tp",
    "ranking": "排序",
    "GPUs": "卡数",
    "global batch (sequences x tokens)": "全局 batch（序列 x token）",
    "MFU (model)": "MFU（模型）",
    "published TP x PP x DP": "公开的 TP x PP x DP",
    "published utilisation": "公开的利用率",
    "planner": "规划器",
    "planner MFU": "规划器 MFU",
    "source": "出处",
    "TP x DP": "TP x DP",
    "measured on rank 0": "rank 0 上实测",
    "formula 16 B x params / (TP x DP)": "公式 16 B x 参数量 / (TP x DP)",
    "+ embeddings, norms sharded by DP only": "+ 只按 DP 切分的 embedding 和 norm",
    "+ padding": "+ 填充",
    "difference": "差值",
    "tracked GB": "跟踪到的 GB",
    "formula GB (4 B, 8 B per parameter held)": "公式 GB（每个持有的参数 4 B、8 B）",
    "layout (4 ranks)": "布局（4 个 rank）",
    "clipped shards: max diff": "裁剪后的分片：最大差",
    "right / one process": "正确 / 单进程",
    "wrong / one process": "错误 / 单进程",
    "rank 0's norms; \"no EP sum\" differs on each EP rank (each sees its own experts)":
        "rank 0 的范数；“缺 EP 求和”在每个 EP rank 上都不同（各自只看到自己的专家）",
    "each norm as rank 0 computes it; a wrong one equals the right one where that dimension has size 1":
        "每个范数都是 rank 0 算出的；某一维大小为 1 时，错误的算法与正确的相等",
    "with DP 1 the loss is not averaged over two replicas: the same gradients, twice as large":
        "DP 为 1 时 loss 不在两个副本上平均：梯度相同，但大一倍",
    "published layout": "公开的布局",
    "GB sent / GPU / step": "每卡每 step 发送 GB",
    "figure": "数字",
    "how": "来源",
    "here": "本次",
    "expected": "预期",
    "data ms": "数据 ms",
    "forward ms": "前向 ms",
    "backward ms": "反向 ms",
    "wait ms": "等待 ms",
    "comm ms": "通信 ms",
    "optimizer ms": "优化器 ms",
    "step ms": "step ms",
    "comm share": "通信占比",
    "timers: comm share": "计时器：通信占比",
    "profiler: comm share": "profiler：通信占比",
    "collective operators seen": "看到的集合通信算子",
    "items/s (workers already running)": "样本/秒（worker 已在运行）",
    "vs 0 workers": "相对 0 个 worker",
    "first pass s (starts the workers)": "第一轮 s（含启动 worker）",
    # -- notebook 01: memory (labkit/memory/activations.py, widgets.py, plots.py, accounting.py)
    "needs {need:.1f} GB (model state {state:.1f} + activations {act:.1f})":
        "需要 {need:.1f} GB（模型状态 {state:.1f} + 激活值 {act:.1f}）",
    "an {gb:g} GB GPU": "一张 {gb:g} GB 的卡",
    "a {gb:g} GB GPU": "一张 {gb:g} GB 的卡",
    "fits: {need}, {spare:.1f} GB to spare on {gpu}": "装得下：{need}，{gpu}上还剩 {spare:.1f} GB",
    "does not fit: {need}, {over:.1f} GB over {gpu} ({x:.2f}x its memory)":
        "装不下：{need}，比{gpu}多 {over:.1f} GB（是其显存的 {x:.2f} 倍）",
    "parameters": "参数量",
    "world size N": "world size N",
    "ZeRO stage": "ZeRO 级别",
    "precision": "精度",
    "sequence": "序列长度",
    "micro-batch": "micro-batch",
    "GPU (GB)": "卡（GB）",
    "log scale (right panel)": "对数坐标（右图）",
    "{gb:g} GB GPU ": "{gb:g} GB 卡 ",
    "this setting:": "当前设置：",
    "left panel": "左图",
    "does NOT fit": "装不下",
    "(spare {gb:.1f} GB)": "（剩余 {gb:.1f} GB）",
    "(over by {gb:.1f} GB)": "（超出 {gb:.1f} GB）",
    "one GPU holds: ": "单卡存放：",
    "{need:.1f} of {cap:g} GB ": "{need:.1f} / {cap:g} GB ",
    "every ZeRO stage, same setting": "同一设置下的各 ZeRO 级别",
    "every ZeRO stage, same setting: {b:g}B params, {precision} {optimizer}, N={n},\nseq {seq} x "
    "batch {mb}, checkpointing {ck}":
        "同一设置下的各 ZeRO 级别：{b:g}B 参数，{precision} {optimizer}，N={n}，\n序列 {seq} x "
        "batch {mb}，激活重计算 {ck}",
    "bytes": "字节",
    "bytes ({unit})": "字节（{unit}）",
    # the categories of a Breakdown as labkit.memory.accounting.table heads its columns (params,
    # grads, master, activations: zh_m0506), and the checkpointing modes as the planner shows
    # them (labkit/plan/form.py, planner.py; "none": above)
    "momentum": "一阶动量 m",
    "variance": "二阶动量 v",
    "other": "其他",
    "buffers": "缓冲区",
    "temporary": "临时张量",
    "selective": "选择性",
    "full": "完全",
    # -- notebook 03 leftovers: BucketedDDP's errors (labkit/ddp/bucketed.py) -----------------
    "BucketedDDP: the gradient of {name!r} was finished twice before sync_gradients(). Run the "
    "backward passes of all micro-batches but the last inside `with ddp.no_sync():`.":
        "BucketedDDP：{name!r} 的梯度在 sync_gradients() 之前完成了两次。除最后一个 micro-batch 外，"
        "其余 micro-batch 的反向都要放在 `with ddp.no_sync():` 里执行。",
    "{name!r} ({k} elements)": "{name!r}（{k} 个元素）",
    "BucketedDDP on rank {rank}: no gradient arrived for {names} in this backward pass: it was not "
    "used in forward, so its bucket never filled. Pass BucketedDDP(model, find_unused_parameters=True) "
    "to all-reduce zeros for it, or set requires_grad=False on it, or delete it from the model.":
        "rank {rank} 上的 BucketedDDP：这次反向中 {names}没有收到梯度：它没有在前向中用到，所以它的桶"
        "一直没有填满。请用 BucketedDDP(model, find_unused_parameters=True) 为它 all-reduce 零，"
        "或者给它设 requires_grad=False，或者把它从模型里删掉。",
    # -- notebook 03 leftovers: the benchmark's table and summary (labkit/ddp/benchmark.py) ----
    "Gradient {grad:.1f} MB; ring all-reduce formula 2(N-1)/N x gradient = {ring:.1f} MB per "
    "rank per step (N={n}).":
        "梯度 {grad:.1f} MB；环形 all-reduce 公式 2(N-1)/N x 梯度 = 每个 rank 每步 {ring:.1f} MB（N={n}）。",
    "variant": "实现",
    "vs torch DDP, same cap and view": "与 torch DDP 之比（相同 cap 和 view）",
    "sent MB/step": "每步发送 MB",
    "sent/formula": "发送/公式",
    "grad+bucket MB": "梯度+桶 MB",
    "/ gradient": "/ 梯度",
    "Step ms: median of the slowest rank's step. Ratios: median over rounds of the ratio of steps "
    "taken back to back.":
        "step ms：最慢 rank 的单步时间的中位数。比值：对前后紧接着执行的两步取时间之比，再对各轮取中位数。",
    "bucket_cap_mb={cap}{view}: labkit bucketed / torch DDP step time = {ratio:.2f}":
        "bucket_cap_mb={cap}{view}：单步时间 labkit bucketed / torch DDP = {ratio:.2f}",
    "labkit naive / {other}{cap} step time = {ratio:.2f}":
        "单步时间 labkit naive / {other}{cap} = {ratio:.2f}",
    # -- notebook 04 leftovers: step() before backward() (labkit/zero/optim.py, masters.py) -----
    "rank {rank}: optimizer.step() was called before any loss.backward() since the last "
    "zero_grad(): there are no gradients to reduce. Call loss.backward() first, then step(), then "
    "zero_grad().":
        "rank {rank}：自上次 zero_grad() 以来还没有调用过 loss.backward()，就调用了 optimizer.step()："
        "没有可以归约的梯度。请先 loss.backward()，再 step()，最后 zero_grad()。",
    "rank {rank}: optimizer.step() was called before any loss.backward() since the last "
    "zero_grad(): there are no gradients. Call loss.backward() first, then step(), then zero_grad().":
        "rank {rank}：自上次 zero_grad() 以来还没有调用过 loss.backward()，就调用了 optimizer.step()："
        "还没有梯度。请先 loss.backward()，再 step()，最后 zero_grad()。",

    # -- notebook 11: the convergence checklist against chance and one process (issue 33) --
    "global gradient norm {norm:.3g}, one process's on the global batch {ref:.3g} (within {rtol:g})":
        '全局梯度范数 {norm:.3g}，单进程在全局 batch 上的是 {ref:.3g}（相差在 {rtol:g} 以内）',
    'loss {first:.2f} -> {last:.2f} in {steps} steps on one rank (chance: log {vocab} = {chance:.2f})':
        '单个 rank 上 {steps} 步内 loss {first:.2f} -> {last:.2f}（随机猜测：log {vocab} = {chance:.2f}）',
    'global gradient norm {norm:.3g} (above {max_norm:g} or not finite: clip it, lower the learning rate, check the loss scale)':
        '全局梯度范数 {norm:.3g}（超过 {max_norm:g} 或不是有限值：做梯度裁剪、降低学习率、检查 loss scale）',
    "global gradient norm {norm:.3g}, one process's on the global batch {ref:.3g} ({ratio:.3g}x): the all-reduced gradient is not the global batch's mean (summed instead of averaged, or averaged twice?)":
        '全局梯度范数 {norm:.3g}，单进程在全局 batch 上的是 {ref:.3g}（{ratio:.3g} 倍）：all-reduce 之后的梯度不是全局 batch 上的平均（是不是求了和没有取平均，或者平均了两次？）',

    # -- notebook 14: the capstone's trainer (labkit/capstone) --
    "dp({dp}) x pp({pp}) x tp({tp}) = {n} != world size ({w}); start labkit.Cluster({n})":
        "dp({dp}) x pp({pp}) x tp({tp}) = {n} 不等于 world size（{w}）；请启动 labkit.Cluster({n})",
    "wrong must be None or one of {names}, got {wrong!r}":
        "wrong 必须是 None 或 {names} 之一，收到的是 {wrong!r}",
    "batch {b} rows do not split into dp({dp}) x microbatches({m}) = {n}: pick a batch that is a multiple of {n}":
        "batch 的 {b} 行分不成 dp({dp}) x microbatches({m}) = {n} 份：请取 {n} 的倍数作为 batch",
    "{n} blocks do not split into pp = {pp} equal stages; pick pp among the divisors of {n}":
        "{n} 个 block 分不成 pp = {pp} 个相等的 stage；请从 {n} 的约数中选 pp",
    "derived bound (equal to one process below it)": "推导出的界（在它之下即与单进程相等）",
    "loss (nats per byte)": "loss（每字节 nat）",
    "|loss - one process's loss|": "|loss - 单进程的 loss|",
    "the loss per step": "每一步的 loss",
    "distance from one process": "与单进程的距离",
    "every layout on one process's curve; the wrong variants leave it": "每种布局都在单进程的曲线上；错误的变体离开了它",
    "wrong={wrong!r} is a variant of the all-reduce route: run it with zero=False":
        "wrong={wrong!r} 是 all-reduce 路线上的变体：请用 zero=False 运行它",
}
