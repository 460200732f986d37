"""Chinese catalog: notebooks 12 (context parallelism) and 13 (expert parallelism): the
checkers' diagnoses, the MoE layer's errors and the figures. Merged by labkit.i18n.zh (PARTS)."""

MESSAGES = {
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
    "scores near 120 (exp overflows fp32)": "分数接近 120（exp 会让 fp32 溢出）",
    "return tensors (o, lse); got {o}, {lse}": "应返回张量 (o, lse)；得到的是 {o}、{lse}",
    "on {label}: o is {o} and lse {lse}; want {o_want} and {lse_want} (weights need "
    "[..., None] to scale the rows of o)":
        "在“{label}”上：o 的形状是 {o}，lse 是 {lse}；应为 {o_want} 和 {lse_want}（权重需要加上 [..., None] 才能按行缩放 o）",
    "on {label}: inf or nan in the result: exp(lse_a) overflows when the "
    "scores are large; subtract the larger log-sum-exp first "
    "(exp(lse_a - lse) with lse = torch.logaddexp(lse_a, lse_b))":
        "在“{label}”上：结果里有 inf 或 nan：分数很大时 exp(lse_a) 会溢出；先减去较大的 log-sum-exp"
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
    "score entries computed per rank": "每个 rank 计算的注意力分数个数",
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
    "expert (colour: rank that holds it)": "专家（颜色：持有它的 rank）",
    "{title} step {step}": "{title} 第 {step} 步",
    "balanced: 1/{n}": "均衡：1/{n}",
    "busiest rank's share": "最忙 rank 的占比",
    "balanced: {total} copies / {e} experts = {each:.0f}": "均衡：{total} 份副本 / {e} 个专家 = {each:.0f}",
    "token copies computed": "计算的 token 副本数",
    "the busiest rank's share of all token copies": "最忙的 rank 占全部 token 副本的比例",
    "stays on its rank": "留在本 rank",
    "colour: rank (of the tokens, of the expert)": "颜色：rank（token 所在的、专家所在的）",
    "routing: token copies from each rank (row) to each expert (column)":
        "路由：从每个 rank（行）发往每个专家（列）的 token 副本数",
    "one square per (query chunk, key chunk) pair: 1 contiguous, 2 x 2 zig-zag":
        "每个 (query 块, key 块) 对一个方格：连续布局 1 个，zig-zag 2 × 2 个",

    # -- notebook 12: the checks every rank agrees on (labkit/cp/shard.py, layout.py) ----------
    "rank {r}: method={method!r} is not one of {methods}": "rank {r}：method={method!r} 不在 {methods} 之中",
    "rank {r}: layout={layout!r} is not one of {layouts}": "rank {r}：layout={layout!r} 不在 {layouts} 之中",
    "rank {j}: q, k and v must be 4-D (batch, heads, sequence, head_dim); got shapes {q}, {k}, {v} "
    "(-1: not 4-D)":
        "rank {j}：q、k、v 必须是 4 维张量 (batch, heads, sequence, head_dim)；收到的形状是 {q}、{k}、{v}"
        "（-1：不是 4 维）",
    "rank {j} has {field} = {a} but rank 0 has {b}: every rank must call attention with the same "
    "shapes and options; only the number of positions differs (its part of the sequence)":
        "rank {j} 的 {field} = {a}，而 rank 0 的是 {b}：每个 rank 调用 attention 时的形状和选项都必须相同，"
        "只有位置数可以不同（各自持有的那段序列）",
    "query heads": "query 头数",
    "query positions": "query 位置数",
    "head size": "每头维度",
    "K batch": "K 的 batch",
    "K heads": "K 的头数",
    "K positions": "K 的位置数",
    "K head size": "K 的每头维度",
    "V batch": "V 的 batch",
    "V heads": "V 的头数",
    "V positions": "V 的位置数",
    "V head size": "V 的每头维度",
    "rank {j}: q, k and v hold {q}, {k} and {v} positions; give each rank the same positions of q, "
    "k and v (shard_sequence)":
        "rank {j}：q、k、v 分别有 {q}、{k}、{v} 个位置；每个 rank 上的 q、k、v 必须是同一段位置"
        "（用 shard_sequence 切分）",
    "rank {j}: k {k} and v {v} must match each other and q's head size {d}":
        "rank {j}：k {k} 和 v {v} 的形状必须一致，每头维度也必须等于 q 的 {d}",
    "rank {j}: {hq} query heads do not divide into groups of the {hkv} K/V heads (grouped-query "
    "attention needs a multiple)":
        "rank {j}：{hq} 个 query 头无法平均分给 {hkv} 个 K/V 头（分组查询注意力要求前者是后者的整数倍）",
    "rank {j} holds {have} positions but the {layout} layout of {seq} positions on {n} ranks gives "
    "it {want}: split the sequence with labkit.cp.shard_sequence(x, dim=2, layout={layout!r})":
        "rank {j} 持有 {have} 个位置，但把 {seq} 个位置按 {layout} 布局分到 {n} 个 rank 上，它应得 "
        "{want} 个：请用 labkit.cp.shard_sequence(x, dim=2, layout={layout!r}) 切分序列",
    "layout={layout!r} is not one of {layouts}": "layout={layout!r} 不在 {layouts} 之中",
    "the context-parallel degree must be >= 1, got {n}": "上下文并行度必须 >= 1，收到的是 {n}",
    "a sequence of {seq} positions cannot be split into the {parts} chunks the {layout} layout "
    "needs on {n} ranks ({per} per rank); use a sequence of at least {parts} positions or fewer ranks":
        "{seq} 个位置的序列无法切成 {layout} 布局在 {n} 个 rank 上所需的 {parts} 块（每个 rank {per} 块）；"
        "请让序列至少有 {parts} 个位置，或者减少 rank 数",
    "rank {rank} is not in 0..{last}": "rank {rank} 不在 0..{last} 之中",
    "Ulysses on rank {rank}: {n} ranks must divide the {h} query heads and the "
    "{hkv} K/V heads (each rank takes h/N of them): use a CP degree that divides "
    "{hkv}, or ring attention":
        "rank {rank} 上的 Ulysses：{n} 个 rank 必须能整除 {h} 个 query 头和 {hkv} 个 K/V 头"
        "（每个 rank 分到 h/N 个）：请用能整除 {hkv} 的 CP 度，或者改用环形注意力",

    # -- notebook 13: the all-to-all's argument (labkit/moe/alltoall.py) -------------------------
    "impl must be one of {impls}, got {impl!r}": "impl 必须是 {impls} 之一，收到的是 {impl!r}",

    # -- notebook 12: online_softmax_merge, the new examples (issue 33) --
    ' (your result has no inf or nan: something such as torch.nan_to_num or a clamp hid them, and the numbers left are wrong)':
        '（你的结果里没有 inf 或 nan：是 torch.nan_to_num 或 clamp 之类的东西把它们藏起来了，剩下的数是错的）',
    'on {label}: with log-sum-exps {gap:.0f} apart, exp() of their difference overflows (float32 above 88){hid}: exponentiate only differences that are <= 0, such as lse_x - max(lse_a, lse_b) or lse_x - lse':
        '在“{label}”上：两个 log-sum-exp 相差 {gap:.0f}，对它们的差取 exp() 会溢出（float32 超过 88 就溢出）{hid}：只对 <= 0 的差取指数，例如 lse_x - max(lse_a, lse_b) 或 lse_x - lse',
    'log-sum-exps more than 88 apart (exp of their difference overflows fp32)':
        '相差超过 88 的两个 log-sum-exp（对它们的差取 exp 会让 fp32 溢出）',
    'scores near 750 (exp overflows float64 too)':
        '分数接近 750（exp 连 float64 也会溢出）',
    'a block some queries cannot see, as block a':
        '一个有些 query 看不到的块，放在 a 的位置',
    'a query that sees no key of either block (lse_a = lse_b = -inf)':
        '一个两个块里都看不到任何 key 的 query（lse_a = lse_b = -inf）',
    'on {label}: inf or nan in the result: a row that sees no key of block {x} has lse_{x} = -inf; exp(lse_{x} - lse) = 0 handles it, (-inf) - (-inf) does not':
        '在“{label}”上：结果里有 inf 或 nan：看不到 {x} 块中任何 key 的行有 lse_{x} = -inf；exp(lse_{x} - lse) = 0 能处理这种情况，(-inf) - (-inf) 不能',
    'on {label}: right once both log-sum-exps are shifted down near 0, wrong at lse = {level:.0f}: exp() of a log-sum-exp overflows (float32 above 88, float64 above 709){hid}; never exponentiate a log-sum-exp alone: subtract the larger one first (exp(lse_a - lse) with lse = torch.logaddexp(lse_a, lse_b))':
        '在“{label}”上：把两个 log-sum-exp 一起平移到 0 附近就对了，在 lse = {level:.0f} 时却错了：对 log-sum-exp 取 exp() 会溢出（float32 超过 88，float64 超过 709）{hid}；永远不要单独对一个 log-sum-exp 取指数：先减去较大的那个（exp(lse_a - lse)，其中 lse = torch.logaddexp(lse_a, lse_b)）',
    'on {label}: inf or nan in the result: such a row has lse = -inf too, so lse_a - lse is (-inf) - (-inf) = nan; its output must come out 0 and its lse -inf: subtract a finite stand-in where lse is -inf (torch.where(torch.isinf(lse), 0, lse)) or start from the larger lse only where it is finite':
        '在“{label}”上：结果里有 inf 或 nan：这样的行 lse 也是 -inf，所以 lse_a - lse 是 (-inf) - (-inf) = nan；它的输出必须是 0、lse 必须是 -inf：在 lse 为 -inf 的地方减去一个有限的替代值（torch.where(torch.isinf(lse), 0, lse)），或者只在较大的 lse 有限的地方以它为基准',

    # -- notebook 13: ep_dispatch, the case on a group and the faults it names (issue 33) --
    "rank {r}: no gradient reached xs: your output is cut off from the rows' graph (a .detach(), .data, a tensor rebuilt from values, or torch.no_grad() around a step); keep every step from xs to the output differentiable":
        'rank {r}：没有梯度传到 xs：你的输出与这些行的计算图断开了（.detach()、.data、用数值重新构造的张量，或者某一步包在 torch.no_grad() 里）；从 xs 到输出的每一步都要保持可微',
    '{n} ranks, {e} experts, uneven skewed rows: outputs and the gradients of the rows and of every expert equal one process; the same on groups of size {k} with 3 experts per rank (group=...)':
        '{n} 个 rank、{e} 个专家、不均匀且有偏斜的行：输出、行的梯度和每个专家的梯度都等于单进程的结果；在大小为 {k}、每个 rank 3 个专家的组上（group=...）也一样',
    'rank {r}: in the case on a group of size {k} your function asked dist.{calls}() without the group, which answers for the whole world: pass `group` to get_world_size, get_rank and every collective':
        'rank {r}：在大小为 {k} 的组上的情形里，你的函数调用 dist.{calls}() 时没有传入 group，得到的是整个 world 的答案：把 `group` 传给 get_world_size、get_rank 和每一个集合通信',
    "rank {r}: no gradient reached xs or the experts' weights: your experts ran with autograd off (torch.no_grad() or inference_mode), so there is no graph to go back through; run them with autograd on":
        'rank {r}：没有梯度传到 xs 和专家的权重：你的专家是在关闭 autograd 的情况下运行的（torch.no_grad() 或 inference_mode），所以没有可以反向传播的计算图；运行专家时要打开 autograd',
    "in all-to-all number {i} on rank {rank}: this case runs expert parallelism on a group of {k} ranks, but your all-to-all ran on {where}: pass the function's `group` to every collective (and to get_world_size and get_rank)":
        '在 rank {rank} 的第 {i} 次 all-to-all 中：这个情形在一个 {k} 个 rank 的组上做专家并行，但你的 all-to-all 是在{where}上做的：把函数的 `group` 传给每一个集合通信（以及 get_world_size 和 get_rank）',
    'all-to-all number {i} has no split sizes, so every rank must send the same number of values, a multiple of {n}; rank {a} sends {la} and rank {b} {lb}{hint}':
        '第 {i} 次 all-to-all 没有给出 split 大小，所以每个 rank 必须发送同样多的值，并且是 {n} 的倍数；rank {a} 发送 {la} 个，rank {b} 发送 {lb} 个{hint}',
    "in the second case (expert parallelism on groups of size {k}, {L} experts per rank, the function's `group` argument): {why}":
        '在第二种情形中（在大小为 {k} 的组上做专家并行，每个 rank {L} 个专家，使用函数的 `group` 参数）：{why}',
    'in all-to-all number {i} rank {rank} gave {count} {name} for {n} ranks: a split list has one entry per rank (rows to or from each rank){hint}':
        '在第 {i} 次 all-to-all 中，rank {rank} 为 {n} 个 rank 给出了 {count} 个 {name}：split 列表每个 rank 一项（发往或来自每个 rank 的行数）{hint}',
    "in all-to-all number {i} rank {rank}'s {what} has {rows} rows but its {what} splits add up to {total}: the splits must add up to the rows you pass: in the combine, swap input and output splits (send back what you received)":
        '在第 {i} 次 all-to-all 中，rank {rank} 的 {what} 有 {rows} 行，但它的 {what} split 加起来是 {total}：split 之和必须等于你传入的行数：在 combine 中要交换输入和输出的 split（把收到的发回去）',
    "in all-to-all number {i} rank {rank}'s output splits {outs} are the rows each of its experts gets (the counts' column sums); the split list counts rows from each source rank: the row sums, {by_rank}":
        '在第 {i} 次 all-to-all 中，rank {rank} 的输出 split {outs} 是它的每个专家收到的行数（计数表的列和）；split 列表统计的是来自每个源 rank 的行数：也就是行和 {by_rank}',
    'the whole world (group=None)':
        '整个 world（group=None）',
    'another group':
        '另一个组',
    ': torch.bincount(expert) stops at the largest expert present; count with minlength=E':
        '：torch.bincount(expert) 只数到出现过的最大专家编号为止；计数时要加 minlength=E',
    ", not one per expert: add up each rank's experts (per_expert.view(n, E // n).sum(1))":
        '，而不是每个专家一项：把每个 rank 上各专家的计数加起来（per_expert.view(n, E // n).sum(1)）',
}
