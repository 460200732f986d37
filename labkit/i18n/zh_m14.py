"""Chinese catalog: notebook 14 (the capstone): the grid and gradient-reduction checker
(labkit/check/capstone.py). Merged by labkit.i18n.zh (PARTS)."""

MESSAGES = {
    "the grid equals the notes' on {n} layouts": "网格在 {n} 种布局上都与讲义的一致",
    "replicated: dp, cp, tp; TP-split: dp, cp; experts: edp":
        "复制的参数：dp、cp、tp；按 TP 切分的权重：dp、cp；专家：edp",
    "{shape}: your {d} group {got} is not one of the grid's: rank {r}'s {d} group is {want} "
    "(the ranks that differ only in their {d} coordinate)":
        "{shape}：你的 {d} 组 {got} 不是网格里的组：rank {r} 的 {d} 组是 {want}（只在 {d} 坐标上不同的那些 rank）",
    "reduce_over({kind!r}) returned {d!r}, not a dimension: the names are {names}{hint}":
        "reduce_over({kind!r}) 返回了 {d!r}，它不是一个维度：维度的名字是 {names}{hint}",
    "nothing": "（什么都没有）",
    "reduce_over({kind!r}): {what} is summed over {said} but must be over {d} too: {why}":
        "reduce_over({kind!r})：{what}只在 {said} 上求和，但还必须在 {d} 上求和：{why}",
    " (without ranks: start labkit.Cluster(8) to sum real gradients too)":
        "（没有在 rank 上运行：用 labkit.Cluster(8) 启动集群，还会对真实的梯度求和）",
    "; on {n} ranks (dp {dp} x pp {pp} x tp {tp} x cp {cp}, ep {ep}) every gradient sums the ranks "
    "one process's does":
        "；在 {n} 个 rank 上（dp {dp} x pp {pp} x tp {tp} x cp {cp}，ep {ep}），每个梯度求和的 rank 都与单进程的一致",
    "{shape}: {d} is {value!r}; return a list of groups, each a list of ranks (e.g. [[0, 1], [2, 3]])":
        "{shape}：{d} 是 {value!r}；请返回由组构成的列表，每个组是一个 rank 列表（例如 [[0, 1], [2, 3]]）",
    "{shape}: your grid returned {kind}; return a dict {{'dp': groups, 'pp': groups, 'tp': groups, "
    "'cp': groups}}":
        "{shape}：你的 grid 返回了 {kind}；请返回字典 {{'dp': groups, 'pp': groups, 'tp': groups, 'cp': groups}}",
    "{shape}: the dict has no {missing}; give every dimension, with groups of one rank where its degree is 1":
        "{shape}：字典里没有 {missing}；每个维度都要给出，度为 1 的维度就给只有一个 rank 的组",
    "{shape}: your grid is laid out {order} (fastest-varying first); the course's is {want}: rank = "
    "((dp x PP + pp) x CP + cp) x TP + tp, picotron's torch.arange(world).view(dp, pp, cp, tp); TP "
    "innermost keeps each TP group on neighbouring ranks, inside a node":
        "{shape}：你的网格排布是 {order}（变化最快的在前）；课程的是 {want}：rank = ((dp x PP + pp) x CP + cp) x TP + tp，"
        "即 picotron 的 torch.arange(world).view(dp, pp, cp, tp)；TP 放在最内层，每个 TP 组才是相邻的 rank，留在一个节点之内",
    "reduce_over({kind!r}) returned {value!r}; return the dimensions' names, e.g. ['dp', 'cp']":
        "reduce_over({kind!r}) 返回了 {value!r}；请返回维度的名字，例如 ['dp', 'cp']",
    "reduce_over({kind!r}): {what} is summed over {said}; {d} does not belong there: {why}":
        "reduce_over({kind!r})：{what}在 {said} 上求和；其中 {d} 不该有：{why}",
    "{shape}: your {d} groups hold rank {r}, but the ranks are 0..{last}{hint}":
        "{shape}：你的 {d} 组里有 rank {r}，但 rank 的范围是 0..{last}{hint}",
    "{shape}: your {d} groups have {sizes} ranks, a {d} group has {d} = {k} ranks (one per {d} "
    "coordinate){hint}":
        "{shape}：你的 {d} 组有 {sizes} 个 rank，而一个 {d} 组应有 {d} = {k} 个 rank（每个 {d} 坐标一个）{hint}",
    "{shape}: in your {d} groups rank {r} is {how}: the groups of one dimension split the {world} "
    "ranks, each rank in exactly one":
        "{shape}：在你的 {d} 组里 rank {r} {how}：同一维度的各组把 {world} 个 rank 分开，每个 rank 恰好属于一个组",
    "{shape}: your {d} groups are the grid's {o} groups (rank 0's {d} group is {want}, not {got})":
        "{shape}：你的 {d} 组其实是网格的 {o} 组（rank 0 的 {d} 组是 {want}，不是 {got}）",
    "on rank {r} the {kind} gradient summed ranks {got}; one process's gradient sums ranks {want}":
        "在 rank {r} 上，{kind} 梯度求和的是 rank {got}；单进程的梯度求和的是 rank {want}",
    " (the whole world is every dimension at once, and the pipeline stages hold different layers)":
        "（整个 world 是所有维度同时求和，而流水线的各级持有的是不同的层）",
    " (counted from 1?)": "（是从 1 开始数的吗？）",
    ": those are {o}'s sizes, are two dimensions swapped?": "：那是 {o} 的大小，是不是把两个维度弄反了？",
    "in two groups": "出现在两个组里",
    "in no group": "不在任何组里",
    "each DP replica saw other samples of the batch, so its gradient is a part of the sum":
        "每个 DP 副本看到的是批里的其他样本，所以它的梯度只是总和的一部分",
    "each CP rank saw only its chunks of every sequence, so its gradient is a part of the sum "
    "(forgetting CP is the capstone's first wrong variant: the loss curve drifts)":
        "每个 CP rank 只看到每条序列中属于它的块，所以它的梯度只是总和的一部分（忘了 CP 正是综合项目的第一个错误变体：损失曲线会偏离）",
    "every TP rank holds this parameter whole but saw only its part of the activations (sequence "
    "parallelism: s / tp of the tokens each), so its gradient is a part of the sum":
        "每个 TP rank 都持有这个参数的完整副本，但只看到了自己那部分激活（序列并行：每个 rank s / tp 个 token），所以它的梯度只是总和的一部分",
    "an expert's replicas (the ranks with the same ep index, EDP = CP x DP / EP of them) each routed "
    "other tokens to it":
        "一个专家的各个副本（ep 下标相同的 rank，共 EDP = CP x DP / EP 个）各自把不同的 token 路由给了它",
    "each pipeline stage holds other layers: there is nothing to sum over pp":
        "流水线的每一级持有的是不同的层：在 pp 上没有什么可求和的",
    "each TP rank holds a different slice of a TP-split weight, so summing over tp adds the gradients "
    "of different slices":
        "按 TP 切分的权重，每个 TP rank 持有不同的一片，所以在 tp 上求和会把不同切片的梯度加到一起",
    "the ranks of an EP group hold different experts: summing over ep adds the gradients of different experts":
        "一个 EP 组里的 rank 持有不同的专家：在 ep 上求和会把不同专家的梯度加到一起",
    "an expert's weights live on one rank of each EP group, and the dp group also reaches ranks that "
    "hold other experts: reduce over edp, the ranks that hold the same experts":
        "一个专家的权重只在每个 EP 组的一个 rank 上，而 dp 组还会连到持有其他专家的 rank：应在 edp 上归约，即持有相同专家的那些 rank",
    "an expert's weights live on one rank of each EP group, and the cp group also reaches ranks that "
    "hold other experts: reduce over edp, the ranks that hold the same experts":
        "一个专家的权重只在每个 EP 组的一个 rank 上，而 cp 组还会连到持有其他专家的 rank：应在 edp 上归约，即持有相同专家的那些 rank",
    "edp is the experts' data-parallel group; a dense parameter is reduced over dp and cp":
        "edp 是专家的数据并行组；稠密参数应在 dp 和 cp 上归约",
    "a replicated parameter's gradient (a norm's weight)": "复制参数（如归一化层的权重）的梯度",
    "a TP-split weight's gradient": "按 TP 切分的权重的梯度",
    "an expert weight's gradient": "专家权重的梯度",
}
