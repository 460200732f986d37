"""Chinese catalog, notebook 02 (collectives and the ring): its checkers and what its library
prints or draws. Merged into `labkit.i18n.zh.MESSAGES`; the same rules (same format fields,
machine-read words untouched)."""

MESSAGES = {
    # -- notebook 02: ring_all_reduce (labkit/check/comm.py) ----------------------------------
    ": ": "：",
    "; ": "；",
    ". {sentence}": "。{sentence}",
    "world size {k}, length {length}, {dtype}": "world size {k}，长度 {length}，{dtype}",
    "a group of {k} ranks, global ranks {first}..{last} (rank r of the group is global rank "
    "r + {first}), length {length}, {dtype}":
        "{k} 个 rank 组成的进程组，全局 rank {first}..{last}（组内 rank r 即全局 rank r + {first}），"
        "长度 {length}，{dtype}",
    "world sizes {sizes}{shifted}; lengths {lengths}; {dtypes}":
        "world size {sizes}{shifted}；长度 {lengths}；{dtypes}",
    " and {k} on global ranks 1..{k}": "，以及全局 rank 1..{k} 上的 {k} 个 rank",
    "rank {rank}: your function left `tensor` unchanged{fresh}: the exercise asks for an "
    "in-place all-reduce (write the sum into `tensor`, for example through the views flat[a:b] "
    "of flat = tensor.view(-1))":
        "rank {rank}：你的函数没有改动 `tensor`{fresh}：练习要求原地 all-reduce（把和写回 `tensor`，"
        "比如通过 flat = tensor.view(-1) 的视图 flat[a:b] 写入）",
    " and returned a new tensor": "，而是返回了一个新张量",
    "rank {rank}, chunk {chunk} (element {i}) is {got:.6g}, expected {want:.6g}":
        "rank {rank}，第 {chunk} 块（元素 {i}）是 {got:.6g}，应为 {want:.6g}",
    "every value is the sum divided by {k}, the mean: the exercise asks for the sum (what "
    "dist.all_reduce does by default); leave the division out":
        "每个值都是和除以 {k}，即平均值：练习要的是和（dist.all_reduce 默认做的就是求和）；去掉这次除法",
    "chunk {c} on rank {rank} still holds this rank's own input: what arrived was never added "
    "into it. In the reduce-scatter add in place, `recv += incoming` (`recv = recv + incoming` "
    "only makes a new tensor; a copy replaces instead of adding)":
        "rank {rank} 上的第 {c} 块仍是本 rank 自己的输入：收到的数据从没加进去。在 reduce-scatter "
        "阶段要原地累加，`recv += incoming`（`recv = recv + incoming` 只会生成一个新张量；拷贝则是"
        "替换而不是累加）",
    "the sends follow the ring schedule, so check the arithmetic: add in reduce-scatter, copy in "
    "all-gather":
        "发送顺序符合环形调度，问题出在算术上：reduce-scatter 阶段做加法，all-gather 阶段做拷贝",
    "tensor.chunk({k}) makes only {m} chunks": "tensor.chunk({k}) 只切出 {m} 块",
    "tensor.chunk({k}) makes only {m} chunk": "tensor.chunk({k}) 只切出 {m} 块",
    " of a length-{length} tensor (chunks of ceil(length / n) elements, no empty ones): cut with "
    "chunk_bounds(numel, n), which always makes n chunks, some of them empty":
        "（张量长度 {length}；每块 ceil(length / n) 个元素，不会有空块）：改用 chunk_bounds(numel, n) "
        "来切，它总是切出 n 块，其中有的可以是空块",
    "rank {r} crashed ({why})": "rank {r} 崩溃了（{why}）",
    "rank {r} crashed ({why}) in {frame}": "rank {r} 崩溃了（{why}），位置 {frame}",
    ". gloo aborts when a send and the recv it meets differ in size: each receive must be "
    "exactly as long as the chunk its neighbour sends":
        "。send 与它匹配的 recv 大小不一致时 gloo 会直接中止：每次接收的长度必须恰好等于邻居发来的那一块",

    # -- notebook 02: the diagnoses from the ring's messages (labkit/check/ring_diagnosis.py) --
    "rank {rank} never sends elements {a}..{b} of {length}: chunks cut with numel // n "
    "({length} // {k} = {q}) leave out the last numel % n = {rest}; cut with "
    "chunk_bounds(numel, n) (sizes differ by at most one)":
        "rank {rank} 从没发送 {length} 个元素中的第 {a}..{b} 个：用 numel // n（{length} // {k} = {q}）"
        "切块会漏掉最后 numel % n = {rest} 个元素；改用 chunk_bounds(numel, n) 切块（各块大小最多差一）",
    "rank {r}, send {s} ({phase} step {step})": "rank {r} 的第 {s} 次发送（{phase} 第 {step} 步）",
    "rank {r} made the reduce-scatter's {n_rs} sends and no all-gather: after the reduce-scatter "
    "each rank holds only its own summed chunk; the all-gather's n - 1 = {steps} steps pass the "
    "summed chunks around the ring":
        "rank {r} 完成了 reduce-scatter 的 {n_rs} 次发送，却没有做 all-gather：reduce-scatter 之后"
        "每个 rank 只持有自己那一块的和；还要用 all-gather 的 n - 1 = {steps} 步把求好和的块沿环传一圈",
    "rank {r} made {sent} non-empty sends, the ring needs {need} here ({steps} reduce-scatter + "
    "{steps} all-gather steps): a step is missing":
        "rank {r} 做了 {sent} 次非空发送，环形算法在这里需要 {need} 次（{steps} 步 reduce-scatter + "
        "{steps} 步 all-gather）：少了一步",
    "{where}: sent elements {a}..{b}, which is not one of the ring's chunks "
    "(chunk_bounds({length}, {k}) = {bounds})":
        "{where}：发送了第 {a}..{b} 个元素，这不是环上的任何一块（chunk_bounds({length}, {k}) = {bounds}）",
    "{where}: sent chunk {c}, the ring sends chunk {want} at this step":
        "{where}：发送了第 {c} 块，环形算法这一步应发送第 {want} 块",
    ": after your reduce-scatter rank {r} holds the whole sum of chunk {own}, so the all-gather "
    "sends that chunk first, then at each step the chunk it received the step before":
        "：你的 reduce-scatter 结束后，rank {r} 持有第 {own} 块的完整和，所以 all-gather 先发这一块，"
        "之后每一步发上一步收到的那一块",
    ": at each reduce-scatter step a rank passes on the chunk it added into the step before "
    "(chunk {before})":
        "：reduce-scatter 的每一步，rank 都把上一步累加进来的那一块（第 {before} 块）继续往下传",
    "rank {r}: {sent} sends, the ring needs {need}": "rank {r}：发送了 {sent} 次，环形算法需要 {need} 次",
    "the sum is right, but rank {r} sent no point-to-point message: the exercise is to build the "
    "all-reduce from isend/irecv (or send/recv), not to call a collective":
        "和是对的，但 rank {r} 没有发送任何点对点消息：练习是要用 isend/irecv（或 send/recv）"
        "搭出 all-reduce，而不是调用集合通信",
    "the sum is right, but rank {r} sent {sent} elements in {messages} messages where the ring "
    "sends {need} ({steps} reduce-scatter + {steps} all-gather steps of one chunk each): a step "
    "too many? Each phase has n - 1 steps (range(n - 1))":
        "和是对的，但 rank {r} 用 {messages} 条消息发送了 {sent} 个元素，而环形算法只发 {need} 个"
        "（{steps} 步 reduce-scatter + {steps} 步 all-gather，每步一块）：多走了一步？每个阶段只有 "
        "n - 1 步（range(n - 1)）",
    "rank {a} posted {sends} sends to rank {b}, which posted {recvs} receives from rank {a}":
        "rank {a} 向 rank {b} 发起了 {sends} 次发送，而对方发起了 {recvs} 次来自 rank {a} 的接收",
    "chunk {c} ({n} elements)": "第 {c} 块（{n} 个元素）",
    "a buffer of {n} elements": "一个 {n} 个元素的缓冲区",
    "rank {src} sent {what} to rank {dst}, whose matching recv (its message {i} from rank {src}) "
    "was into {into}":
        "rank {src} 把{what}发给了 rank {dst}，而对方与之匹配的 recv（收自 rank {src} 的第 {i} 条消息）"
        "的接收缓冲是{into}",
    "rank {r} finished its part and waits for the others": "rank {r} 已完成自己的部分，在等其他 rank",
    "its last message, number {n}, was {kind} to rank {peer}":
        "它的最后一条消息是第 {n} 条，向 rank {peer} 的 {kind}",
    "its last message, number {n}, was {kind} from rank {peer}":
        "它的最后一条消息是第 {n} 条，来自 rank {peer} 的 {kind}",
    "no message posted": "一条消息也没发起",
    "rank {r} waits {where} at {at} ({msg})": "rank {r} 卡在 {where}，位置 {at}（{msg}）",
    "rank {r} waits {where} ({msg})": "rank {r} 卡在 {where}（{msg}）",
    "hung (world size {k}, length {length}, {dtype})": "卡住了（world size {k}，长度 {length}，{dtype}）",
    "hung": "卡住了",
    ". A blocking send or recv waits for the other side, and every rank started with the same "
    "one: post them with isend/irecv, then wait on both":
        "。阻塞的 send 或 recv 会一直等对方，而每个 rank 都先调用了同一个：改用 isend/irecv "
        "同时发起两者，再分别等待",
    ". {pair}: every send needs a matching receive on the other side":
        "。{pair}：每次发送都需要对方有一次匹配的接收",
    ". Every rank waits for a message no one sends: post the step's irecv and isend before "
    "waiting on either":
        "。每个 rank 都在等一条没人发的消息：先发起这一步的 irecv 和 isend，再等待其中任何一个",

    # -- notebook 02: mistakes stopped inside the ranks (labkit/check/ring_watch.py) ----------
    "{kind} number {number} (to rank {peer})": "第 {number} 次 {kind}（发往 rank {peer}）",
    "{kind} number {number} (from rank {peer})": "第 {number} 次 {kind}（来自 rank {peer}）",
    "rank {rank} never waited on its {which}: keep every request and call .wait() on it; a "
    "message whose request is dropped unwaited is not sure to arrive (nor its buffer safe to "
    "reuse)":
        "rank {rank} 从没等待它的{which}：保留每个请求并对它调用 .wait()；请求没等待就被丢掉的消息"
        "不保证能送达（它的缓冲区也不能安全复用）",
    "rank {r}": "rank {r}",
    "global rank {peer}, which is not in the group": "全局 rank {peer}，它不在这个进程组里",
    "global rank {peer} (not in the group)": "全局 rank {peer}（不在进程组里）",
    "global rank {peer} (rank {there} of the group)": "全局 rank {peer}（组内 rank {there}）",
    "rank {me} of the group (global rank {mine}) sends to rank {want} of the group (global rank "
    "{theirs})":
        "组内 rank {me}（全局 rank {mine}）要发给组内 rank {want}（全局 rank {theirs}）",
    "rank {me} of the group (global rank {mine}) receives from rank {want} of the group (global "
    "rank {theirs})":
        "组内 rank {me}（全局 rank {mine}）要从组内 rank {want}（全局 rank {theirs}）接收",
    " as {kind}(..., {arg}={peer}) without group=: on the whole world that is {reads}. Pass "
    "group=group and {garg}={want} (group ranks; or {arg}=dist.get_global_rank(group, {want}))":
        "，写成了 {kind}(..., {arg}={peer}) 且没传 group=：在整个 world 上这指的是{reads}。"
        "传 group=group 和 {garg}={want}（组内 rank；或者 {arg}=dist.get_global_rank(group, {want})）",
    " as {kind}(..., {arg}={peer}, group=group): {arg}= is a global rank even with group=, so "
    "that is {reads}; use {garg}={want} (or {arg}=dist.get_global_rank(group, {want}))":
        "，写成了 {kind}(..., {arg}={peer}, group=group)：即使传了 group=，{arg}= 也是全局 rank，"
        "所以这指的是{reads}；改用 {garg}={want}（或者 {arg}=dist.get_global_rank(group, {want})）",
    "rank {me} sends to {who} ({kind}); the ring sends to the right-hand neighbour {right} (group "
    "ranks: rank + 1 and rank - 1, mod the group's size)":
        "rank {me} 发给了 {who}（{kind}）；环形算法发给右邻居 {right}（组内 rank：rank + 1 和 "
        "rank - 1，对组的大小取模）",
    "rank {me} receives from {who} ({kind}); the ring receives from the left-hand neighbour "
    "{left} (group ranks: rank + 1 and rank - 1, mod the group's size)":
        "rank {me} 从 {who} 接收（{kind}）；环形算法从左邻居 {left} 接收（组内 rank：rank + 1 和 "
        "rank - 1，对组的大小取模）",
    "rank {me} sends a {dtype} buffer while the tensor is {want}":
        "rank {me} 用 {dtype} 缓冲区发送，而张量是 {want}",
    "rank {me} receives into a {dtype} buffer while the tensor is {want}":
        "rank {me} 用 {dtype} 缓冲区接收，而张量是 {want}",
    ": make buffers with torch.empty_like(chunk), the same dtype as the tensor (gloo and NCCL "
    "match messages by bytes)":
        "：用 torch.empty_like(chunk) 创建缓冲区，与张量同一 dtype（gloo 和 NCCL 按字节匹配消息）",
    "world size (dist.get_world_size())": "world size（dist.get_world_size()）",
    "rank (dist.get_rank())": "rank（dist.get_rank()）",
    "world size (labkit.world_size())": "world size（labkit.world_size()）",
    "rank (labkit.rank())": "rank（labkit.rank()）",
    "your function asked for the {what} without the group: inside a group of {k} of the {world} "
    "ranks that is the world's, not the group's; use dist.get_world_size(group) and "
    "dist.get_rank(group)":
        "你的函数取 {what} 时没传进程组：在 {world} 个 rank 中 {k} 个组成的进程组里，这得到的是整个 "
        "world 的值，不是组内的；用 dist.get_world_size(group) 和 dist.get_rank(group)",
    # -- notebook 02: what the library prints and draws (labkit/comm/busbw.py, draw.py, runs.py)
    # ", " is in zh_m07.py (，): one entry for every list the library joins
    "({n} more events not shown)": "（另有 {n} 条事件未显示）",
    "rank {rank}: the recorded ring gave a wrong sum": "rank {rank}：录制的环形 all-reduce 算出的和不对",
    "world_size must be between 1 and the cluster's {most}, got {n}":
        "world_size 必须在 1 到集群的 {most} 之间，却得到了 {n}",
    "expected a torch.Tensor, got {kind}": "需要一个 torch.Tensor，却得到了 {kind}",
    "what each rank holds": "每个 rank 持有的内容",
    "N={n} {op}: sent / S per rank {sent}, formula {form} (largest gap {gap:+,} B on rank {rank}, "
    "allowed {allowed:,.0f} B)":
        "N={n} {op}：每个 rank 的 发送 / S 为 {sent}，公式 {form}（最大偏差 {gap:+,} B，在 rank {rank}，"
        "允许 {allowed:,.0f} B）",
    "world size {n}; busbw factor: all-reduce 2(N-1)/N = {ar:.3g}, reduce-scatter and all-gather "
    "(N-1)/N = {rs:.3g}, broadcast 1":
        "world size {n}；busbw 系数：all-reduce 2(N-1)/N = {ar:.3g}，reduce-scatter 与 all-gather "
        "(N-1)/N = {rs:.3g}，broadcast 为 1",
    "labkit ring / torch all_reduce busbw (median of paired ratios, > 1: the ring is faster): "
    "{ratios}":
        "labkit 环形 / torch all_reduce 的 busbw（逐次配对比值的中位数，> 1 表示环形更快）：{ratios}",
    "labkit's ring took longer than torch's all_reduce at {sizes}":
        "labkit 的环形比 torch 的 all_reduce 慢的消息大小：{sizes}",
    "the naive all-reduce beat the ring at {sizes}": "朴素 all-reduce 比环形快的消息大小：{sizes}",
    "{size} (the ring {x:.1f}x the time)": "{size}（环形用时是它的 {x:.1f} 倍）",
    "at {top}, but not level in this range: at {last} it is {part:.0%} of that":
        "只在 {top} 处，且这个范围内没有走平：到 {last} 只剩最佳值的 {part:.0%}",
    "from {size} on": "从 {size} 起一直如此",
    "only at the largest size, {size}: no level stretch in this range":
        "只在最大的 {size} 处：这个范围内没有走平的一段",
    "{op}: busbw within {share:.0%} of its best ({best:.3g} GB/s) {where}":
        "{op}：busbw 不低于最佳值（{best:.3g} GB/s）的 {share:.0%}：{where}",
    "message size S (bytes)": "消息大小 S（字节）",
    "busbw (GB/s, log scale)": "busbw（GB/s，对数坐标）",
    "bus bandwidth on {n} ranks (nccl-tests convention)": "{n} 个 rank 上的总线带宽（nccl-tests 口径）",
    "torch all_reduce ({backend}'s own)": "torch all_reduce（{backend} 自带的）",
    "torch reduce_scatter": "torch reduce_scatter",
    "torch all_gather": "torch all_gather",
    "torch broadcast": "torch broadcast",
    "labkit ring_all_reduce (send/recv)": "labkit ring_all_reduce（send/recv）",
    "labkit naive_all_reduce (via rank 0)": "labkit naive_all_reduce（经由 rank 0）",
    "start: own data only": "开始：只有自己的数据",
    "{phase} step {step}": "{phase} 第 {step} 步",
    "\n(slowest rank {ms:.2f} ms)": "\n（最慢的 rank {ms:.2f} ms）",
    "all": "全部",
    "from {r}": "来自 {r}",
    "chunk {c}": "第 {c} 块",
    "key": "图例",
    "its own data only": "只有自己的数据",
    "the full sum (all)": "完整的和（全部）",
    "a partial sum of {k} ranks": "{k} 个 rank 的部分和",
    "arrived at this step\n(\"from r\": sent by rank r)": "本步刚收到\n（“来自 r”：由 rank r 发来）",
    "a cell's text: whose data it sums": "格子里的文字：它累加了哪些 rank 的数据",
    "ring all-reduce on {n} ranks, recorded: reduce-scatter ({steps} steps, top), then all-gather "
    "({steps} steps, bottom)":
        "{n} 个 rank 上的环形 all-reduce（实录）：先 reduce-scatter（{steps} 步，上排），"
        "再 all-gather（{steps} 步，下排）",
    # -- notebook 02: latency and bandwidth terms (labkit/comm/latency.py, link.py) --
    "{label}latency term over N = {n0}'s: {a} (steps 2(N-1): {sa}); bandwidth term: {b} "
    "(bytes 2(N-1)/N: {sb}); each within {tol:.0%}":
        "{label}延迟项与 N = {n0} 之比：{a}（步数 2(N-1)：{sa}）；带宽项：{b}"
        "（字节 2(N-1)/N：{sb}）；每项误差都在 {tol:.0%} 以内",
    "throttled: alpha must be >= 0 and rate > 0 (bytes per second) or None, got alpha={alpha}, rate={rate}":
        "throttled：alpha 必须 >= 0，rate 必须 > 0（字节每秒）或为 None，实际 alpha={alpha}，rate={rate}",
    "run": "运行",
    "α_N / α_2": "α_N / α_2",
    "model 2(N-1)/2": "模型 2(N-1)/2",
    "β_N / β_2": "β_N / β_2",
    "model (2(N-1)/N) / 1": "模型 (2(N-1)/N) / 1",
    "α_N: the fitted time of a call at 0 bytes; β_N: its seconds per byte; each over N = 2's, fastest of the repeats":
        "α_N：拟合出的 0 字节时一次调用的时间；β_N：每字节的秒数；都除以 N = 2 的值，取重复中最快的一次",
}
