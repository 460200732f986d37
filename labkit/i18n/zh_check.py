"""Chinese catalog, part 2: the checkers of notebooks 03 (DDP) and 04 (ZeRO). Merged into
`labkit.i18n.zh.MESSAGES`; the same rules (same format fields, machine-read words untouched)."""

MESSAGES = {
    # -- notebook 03: replicas_in_sync, average_gradients (labkit/check/ddp.py) ----------------
    "{count} parameters bit-identical on {n} ranks": "{count} 个参数在 {n} 个 rank 上逐位相同",
    "{name!r} differs: {ranks} != rank 0, max |diff| {gap:.3g}; {k} of {count} parameters differ "
    "- a gradient that was not all-reduced, or weights not broadcast at the start?":
        "{name!r} 不一致：{ranks} != rank 0，最大 |差| {gap:.3g}；{count} 个参数中有 {k} 个不同——"
        "是有梯度没做 all-reduce，还是一开始没有广播权重？",
    "your function changed the parameter {name!r} itself: average its .grad and leave the "
    "weights to the optimizer":
        "你的函数改动了参数 {name!r} 本身：只需要对它的 .grad 求平均，权重留给优化器去更新",
    "is frozen (requires_grad=False)": "被冻结了（requires_grad=False）",
    "is not used in forward": "在前向中没有用到",
    "{name!r} {why} and has no gradient on any rank, but your function gave it one: leave .grad "
    "None there, as DDP does (an optimizer with weight decay would move it otherwise)":
        "{name!r} {why}，在任何 rank 上都没有梯度，你的函数却给了它一个：像 DDP 那样让 .grad 保持 None"
        "（否则带 weight decay 的优化器会挪动它）",
    "{name!r} lost its gradient: .grad is None after your function":
        "{name!r} 的梯度丢了：你的函数运行之后 .grad 变成了 None",
    "{name!r} still holds this rank's own gradient: it was not averaged over the ranks "
    "(all_reduce works in place on the tensor you give it: all-reduce p.grad itself, or copy the "
    "result back into p.grad)":
        "{name!r} 仍是本 rank 自己的本地梯度：没有在各 rank 之间求平均（all_reduce 原地修改你传入的张量："
        "直接对 p.grad 做 all-reduce，或者把结果拷回 p.grad）",
    "{name!r} is exactly {n} x the mean gradient, the sum over ranks: divide by the world size "
    "({n})":
        "{name!r} 正好是平均梯度的 {n} 倍，也就是各 rank 的和：还要除以 world size（{n}）",
    "{name!r} is the mean gradient divided by {n} again: divide by the world size once":
        "{name!r} 是平均梯度又除了一次 {n}：只需要除以 world size 一次",
    "{name!r} is this rank's own gradient divided by {n}: all-reduce it (sum over the ranks) "
    "before dividing":
        "{name!r} 是本 rank 自己的梯度除以 {n}：先做 all-reduce（在各 rank 上求和），再做除法",
    "{name!r} differs from the mean gradient over ranks (one process on the global batch) by up "
    "to {err:.3g}":
        "{name!r} 与各 rank 的平均梯度（单进程跑全局 batch 的结果）最多相差 {err:.3g}",
    "{name!r} has no gradient (.grad is None: a frozen parameter, or one not used in forward): "
    "skip parameters whose .grad is None, as DDP does":
        "{name!r} 没有梯度（.grad 是 None：被冻结的参数，或前向中没用到的参数）：像 DDP 那样跳过 "
        ".grad 为 None 的参数",
    "rank {rank}, step {step}: {why}": "rank {rank}，第 {step} 步：{why}",
    "{n} ranks, {steps} steps: every gradient is the mean over ranks, as one process on the "
    "global batch gets it, with a tied, a frozen and an unused parameter":
        "{n} 个 rank，{steps} 步：每个梯度都是各 rank 的平均，与单进程跑全局 batch 的结果一致，"
        "其中包括共享权重、冻结参数和未使用的参数",

    # -- notebook 04: zero1_step (labkit/check/zero.py) ---------------------------------------
    "torch's reduce_scatter_tensor and all_gather_into_tensor need a length that the world size "
    "divides (equal shards); use labkit.comm.ring_reduce_scatter(grads) and "
    "ring_all_gather(params), which cut the uneven shards of chunk_bounds":
        "torch 的 reduce_scatter_tensor 和 all_gather_into_tensor 要求长度能被 world size 整除（分片等长）；"
        "请用 labkit.comm.ring_reduce_scatter(grads) 和 ring_all_gather(params)，它们按 chunk_bounds "
        "切出不等长的分片",
    "a shard, its gradient and its momentum must all be the length of chunk_bounds(numel, "
    "n)[rank] (ring_reduce_scatter already returns just your shard)":
        "分片、它的梯度和动量的长度都必须等于 chunk_bounds(numel, n)[rank]"
        "（ring_reduce_scatter 返回的已经只是你自己的分片）",
    "rank {r} keeps optimizer state for all {L} elements: ZeRO-1 updates only its own shard "
    "[{lo}, {hi}) and keeps momentum for those {k} elements only (you updated the full parameter)":
        "rank {r} 为全部 {L} 个元素保存了优化器状态：ZeRO-1 只更新自己的分片 [{lo}, {hi})，"
        "也只为这 {k} 个元素保存动量（你更新了整个参数）",
    "; equal shards of {L} // {n} = {q} leave {rem} element(s) to no rank":
        "；按 {L} // {n} = {q} 等分，会有 {rem} 个元素不归任何 rank",
    "; params.chunk({n}) cuts {cuts}, not the shards the ring collectives use":
        "；params.chunk({n}) 切出的是 {cuts}，不是 ring 集合通信使用的分片",
    "wrong shard bounds: rank {r} keeps state for {sizes} elements, its shard is "
    "chunk_bounds({L}, {n})[{r}] = [{lo}, {hi}) ({k} elements: with an uneven size the first "
    "{rem} shard(s) are one longer{equal})":
        "分片边界不对：rank {r} 为 {sizes} 个元素保存了状态，它的分片是 chunk_bounds({L}, {n})[{r}] = "
        "[{lo}, {hi})（{k} 个元素：长度不能整除时，前 {rem} 个分片各多一个元素{equal}）",
    "after step {step}": "第 {step} 步之后",
    ": step 1 matched one process but this one differs (momentum not kept between steps? store "
    "it in the `momentum` dict)":
        "：第 1 步与单进程一致，这一步却不同（动量没有在步与步之间保留？把它存进 `momentum` 字典）",
    ": on each rank only its own shard is up to date (rank 0 holds [{lo}, {hi}) right, the rest "
    "stale): after updating your shard, all-gather (ring_all_gather(params)) so every rank gets "
    "every updated shard":
        "：每个 rank 上只有自己的分片是新的（rank 0 的 [{lo}, {hi}) 正确，其余都是旧值）：更新完自己的分片后，"
        "做一次 all-gather（ring_all_gather(params)），让每个 rank 拿到所有更新后的分片",
    ": no element changed on any rank: update params in place (params[lo:hi] -= ...) where lo, "
    "hi = chunk_bounds({L}, {n})[rank], the shard the all-gather takes from this rank":
        "：没有任何 rank 上有元素变化：请原地更新 params（params[lo:hi] -= ...），其中 lo, hi = "
        "chunk_bounds({L}, {n})[rank]，也就是 all-gather 从本 rank 取走的分片",
    ": rank {r} updated its shard with its own local gradient: reduce the gradients over ranks "
    "first (reduce-scatter, then divide by {n})":
        "：rank {r} 用自己的本地梯度更新了分片：要先在各 rank 之间规约梯度（reduce-scatter，再除以 {n}）",
    ": elements {stale} were updated by no rank: your shards do not cover all {L} elements; use "
    "chunk_bounds({L}, {n}) = {bounds} (equal shards of {L} // {n} = {q} miss the remainder)":
        "：元素 {stale} 没有被任何 rank 更新：你的分片没有覆盖全部 {L} 个元素；请用 chunk_bounds({L}, {n}) "
        "= {bounds}（按 {L} // {n} = {q} 等分会漏掉余数）",
    ": the update is {n} times too large (a factor N = {n}): divide the summed gradient by the "
    "world size ({n}) to get the mean":
        "：更新量大了 {n} 倍（多了因子 N = {n}）：把求和后的梯度除以 world size（{n}）得到均值",
    ": the update is 1/{n} of one process's (a factor 1/N): the gradient was divided by {n} "
    "twice; ring_reduce_scatter sums, so divide once, before or after it":
        "：更新量只有单进程的 1/{n}（多了因子 1/N）：梯度被除了两次 {n}；ring_reduce_scatter 做的是求和，"
        "所以在它之前或之后除一次即可",
    ": the update is {m}/{n} of one process's (a factor (N-1)/N): one rank's gradient is missing "
    "from the sum":
        "：更新量是单进程的 {m}/{n}（多了因子 (N-1)/N）：和里少了一个 rank 的梯度",
    "ranks disagree with each other: was the gradient reduced over ranks?":
        "各 rank 之间结果不一致：梯度在各 rank 之间规约过吗？",
    "reduce-scatter the gradient, update your shard, all-gather":
        "对梯度做 reduce-scatter，更新自己的分片，再 all-gather",
    ": rank {r} element {i} differs from one process by {d:.3g} ({hint})":
        "：rank {r} 的第 {i} 个元素与单进程相差 {d:.3g}（{hint}）",
    " (3/2 as much: an all-reduce, 2(N-1)/N, plus the all-gather, (N-1)/N, is 3(N-1)/N against "
    "2(N-1)/N; the right bytes are 2/3 of yours)":
        "（多了一半：all-reduce 的 2(N-1)/N 加上 all-gather 的 (N-1)/N 是 3(N-1)/N，而应有的是 2(N-1)/N；"
        "正确的字节数是你的 2/3）",
    " ({factor:.2f} times as much)": "（是应有的 {factor:.2f} 倍）",
    "right values, but each rank sent {sent:.2f}x the vector's bytes where reduce-scatter + "
    "all-gather send {ideal:.2f}x{named}: an all-reduce where a reduce-scatter suffices?":
        "数值正确，但每个 rank 发送了向量字节数的 {sent:.2f} 倍，而 reduce-scatter + all-gather 只需 "
        "{ideal:.2f} 倍{named}：是不是在 reduce-scatter 就够的地方用了 all-reduce？",
    "{n} ranks, {steps} steps on {L} elements (uneven shards): same as labkit's reference and as "
    "one process; momentum kept for the own shard only; reduce-scatter + all-gather bytes":
        "{n} 个 rank，{L} 个元素上 {steps} 步（分片不等长）：与 labkit 的参考实现和单进程一致；"
        "只为自己的分片保存动量；通信量为 reduce-scatter + all-gather",
    "rank {r} crashed inside a collective ({error}): gloo aborts a rank when a message does not "
    "match the one it waits for. Every rank must make the same collective calls, in the same "
    "order, with the same sizes (is one inside an `if rank == ...`?)":
        "rank {r} 在集合通信内部崩溃（{error}）：收到的消息与等待的不匹配时，gloo 会中止该 rank。"
        "每个 rank 必须以相同的顺序、相同的大小调用相同的集合通信（是不是有一个写在了 `if rank == ...` 里？）",

    # -- every checker: the learner's code run in the notebook's process (guard.time_limit) --
    'hung: your function had not returned after {s:g} s{where} (a loop that never ends? check its condition and what each pass changes)':
        'hung: 你的函数在 {s:g} 秒后仍未返回{where}（是不是一个永远不会结束的循环？检查它的条件，以及每一轮改变了什么）',
}
