"""The Chinese catalog: English message (the key, format fields included) -> Chinese message
with the same fields (tests/test_i18n.py checks). Terms as in docs/glossary.md. `pass`, `FAIL`,
`ok:`, `MISS:`, "not implemented yet" and checker names are never in a message here: they are
printed around it, in English, for programs (CI, the root conftest.py) to read."""

MESSAGES = {
    # -- checkers: every module (labkit/check/core.py, guard.py) -------------------------------
    " (replace the `raise NotImplementedError` line with your code, then run this cell again)":
        "（尚未实现：把 `raise NotImplementedError` 这一行换成你的代码，再运行这个单元格）",
    "this checker runs your code on the ranks: start a cluster first with "
    "cluster = labkit.Cluster(world_size=4)":
        "这个检查器要在各个 rank 上运行你的代码：请先用 cluster = labkit.Cluster(world_size=4) 启动集群",
    "hung: rank {rank} stuck {where}": "卡住了：rank {rank} 停在 {where}",
    " at {at}": "，位置 {at}",
    ", while {ranks} had returned from your function (every rank must make the same "
    "collective calls, in the same order)":
        "，而 {ranks} 已经从你的函数返回了（每个 rank 必须以相同的顺序调用相同的集合通信）",
    " (a send without a recv, or a collective not every rank called?)":
        "（是不是有 send 没有对应的 recv，或者某个集合通信不是每个 rank 都调用了？）",
    "failed on rank {rank}: {error}": "在 rank {rank} 上出错：{error}",
    "failed: {error}": "出错：{error}",
    "raised {error}": "抛出了 {error}",

    # -- notebook 00: mean_over_ranks (labkit/check/cluster.py) --------------------------------
    "returned its own values unchanged: nothing was averaged (all-reduce the tensor over the "
    "ranks, then divide by the world size)":
        "原样返回了自己的值：什么都没有平均（先在所有 rank 上对张量做 all-reduce，再除以 world size）",
    "returned its own values divided by {n}: they were never summed over the ranks "
    "(dist.reduce leaves the sum on one rank; all_reduce gives it to every rank)":
        "返回的是自己的值除以 {n}：它们从来没有在各 rank 之间求和"
        "（dist.reduce 只把和留在一个 rank 上；all_reduce 让每个 rank 都拿到和）",
    "the values are exactly {n} x the mean, the sum over ranks: divide by the world size ({n})":
        "结果正好是均值的 {n} 倍，也就是各 rank 的和：还要除以 world size（{n}）",
    "the values are the mean divided by {n} again: divide by the world size once":
        "结果是均值又除了一次 {n}：只需要除以 world size 一次",
    "the values are the maximum over ranks: sum them (ReduceOp.SUM), then divide":
        "结果是各 rank 的最大值：应当求和（ReduceOp.SUM），再做除法",
    "the values are {c:.4g} x the mean: the mean is the sum over ranks divided by the world "
    "size ({n})":
        "结果是均值的 {c:.4g} 倍：均值等于各 rank 的和除以 world size（{n}）",
    "values differ by up to {err:.3g} from the mean over ranks":
        "结果与各 rank 的均值最多相差 {err:.3g}",
    "returned None: end your function with `return` and the mean":
        "返回了 None：函数最后要 `return` 均值",
    "returned {type}, not a tensor": "返回了 {type}，而不是张量",
    "shape {got}, expected {want}": "形状是 {got}，应为 {want}",
    ": the mean over ranks is taken element by element, not over the tensor's elements":
        "：跨 rank 的均值是逐元素求的，不是对张量自己的元素求平均",
    "; {ranks} got the mean, so the sum reached only some ranks: dist.reduce leaves it on "
    "one rank, all_reduce on every rank":
        "；{ranks} 拿到了均值，说明和只到达了部分 rank：dist.reduce 只留在一个 rank 上，"
        "all_reduce 则给每个 rank",
    "rank {rank}, case {k} (shape {shape}, {dtype}): {problem}":
        "rank {rank}，第 {k} 组输入（形状 {shape}，{dtype}）：{problem}",
    "{n} ranks, {cases} tensors of different shapes and dtypes":
        "{n} 个 rank，{cases} 个形状和 dtype 各不相同的张量",

    # -- notebook 01: mixed_adam_bytes (labkit/check/memory.py) --------------------------------
    "the working copy of the weights is fp16/bf16 in mixed precision: 2 bytes":
        "混合精度下参与计算的权重是 fp16/bf16：2 字节",
    "gradients are computed in fp16/bf16, like the weights they belong to: 2 bytes":
        "梯度和对应的权重一样，用 fp16/bf16 计算：2 字节",
    "the optimizer's master copy of the weights is fp32: 4 bytes":
        "优化器里的 FP32 主权重是 fp32：4 字节",
    "Adam's first moment is kept in fp32: 4 bytes": "Adam 的一阶动量 m 以 fp32 保存：4 字节",
    "Adam's second moment is kept in fp32: 4 bytes": "Adam 的二阶动量 v 以 fp32 保存：4 字节",
    "{c} is {value!r}, which is {want:g} bytes in GB (or GiB): return bytes":
        "{c} 是 {value!r}，这是把 {want:g} 字节换算成了 GB（或 GiB）：请返回字节数",
    "{c} is {value!r}, 8 x {want:g}: that counts bits; return bytes":
        "{c} 是 {value!r}，等于 8 × {want:g}：这算的是比特数；请返回字节数",
    "{c} is {value!r}, the bytes of one parameter: multiply by n_params "
    "({unit:g} x n_params = {want:g})":
        "{c} 是 {value!r}，只是一个参数的字节数：还要乘以 n_params（{unit:g} × n_params = {want:g}）",
    "{c} is {value!r} bytes ({per:g} per parameter), expected {want:g} ({unit:g} per "
    "parameter): {why}":
        "{c} 是 {value!r} 字节（每个参数 {per:g}），应为 {want:g}（每个参数 {unit:g}）：{why}",
    " (n_params may be a float such as 7e9: use it in arithmetic, not in range() or as an index)":
        "（n_params 可能是 7e9 这样的浮点数：只拿它做算术，不要放进 range() 或当下标）",
    "returned {type}; return a dict with keys {keys}": "返回了 {type}；请返回一个 dict，键为 {keys}",
    "the dict has no {missing} (keys: {keys})": "dict 里缺少 {missing}（键应为：{keys}）",
    "{c} is {value!r}, not a number of bytes": "{c} 是 {value!r}，不是字节数",
    "params and master are swapped: the working weights are fp16/bf16 (2 bytes), the master copy "
    "fp32 (4 bytes)":
        "params 和 master 弄反了：参与计算的权重是 fp16/bf16（2 字节），主权重是 fp32（4 字节）",
    "{n} sizes from 1 to {biggest:.0e} parameters, 5 categories each":
        "{n} 种规模，从 1 到 {biggest:.0e} 个参数，每种 5 个类别",

    # -- a local cluster without a private network (labkit/runtime/local/source.py) -----------
    "labkit: other users of this machine can connect to the ranks' gloo ports ({why}): they can "
    "hang your collectives or change their data. See the threat model in docs/teaching.md.":
        "labkit：这台机器上的其他用户可以连接各 rank 的 gloo 端口（{why}）：他们能让你的集合通信"
        "卡住，或篡改其中的数据。见 docs/teaching.md 中的威胁模型。",

    # -- the cluster's errors (labkit/runtime/errors.py) ---------------------------------------
    "was stopped: {why}": "被停止了：{why}",
    "is gone: {why}": "已经不在了：{why}",
    "exited (torchrun collected its exit status before labkit could read it)":
        "已退出（torchrun 先于 labkit 取走了它的退出状态）",
    "closed its connection but is still running": "关闭了连接，但进程还在运行",
    "died: {how}": "死掉了：{how}",
    "killed by {signal}": "被 {signal} 杀死",
    "killed (SIGKILL: out of memory, or killed from outside)": "被杀死（SIGKILL：内存不足，或被外部杀掉）",
    "crashed with a segmentation fault (SIGSEGV)": "因段错误崩溃（SIGSEGV）",
    "aborted (SIGABRT: a C++ assertion or abort())": "中止（SIGABRT：C++ 断言失败或 abort()）",
    "crashed with a bus error (SIGBUS)": "因总线错误崩溃（SIGBUS）",
    "crashed with a floating-point exception (SIGFPE)": "因浮点异常崩溃（SIGFPE）",
    "terminated (SIGTERM)": "被终止（SIGTERM）",
    "exited with code {code} (os._exit or a C-level exit; {what} is gone)":
        "以退出码 {code} 退出（os._exit 或 C 层面的 exit；{what}已经不在了）",
    "the rank's process": "该 rank 的进程",
    "the zygote": "zygote 进程",
    "the process": "该进程",
    " (the process group's timeout: a collective or recv waited for a rank that never joined it; "
    "Cluster(pg_timeout=...) sets how long)":
        "（进程组超时：某个集合通信或 recv 一直在等一个没有加入的 rank；等多久由 Cluster(pg_timeout=...) 设定）",
    "{n} of {world_size} ranks failed in {label}:": "{label} 中 {world_size} 个 rank 里有 {n} 个出错：",
    "{n} of {world_size} rank failed in {label}:": "{label} 中 {world_size} 个 rank 里有 {n} 个出错：",
    "Traceback (on {ranks}, most recent call last):": "Traceback（{ranks} 上，最近的调用在最后）：",
    "{ranks} then failed because a rank they were talking to died ({error})":
        "{ranks} 随后也出错了，因为与它们通信的 rank 死掉了（{error}）",
    "{ranks} had not finished (waiting for a failed rank in a collective, probably) and were "
    "stopped:":
        "{ranks} 还没有结束（多半是在集合通信里等那个出错的 rank），已被停止：",
    "The cluster starts fresh ranks for the next run; variables made by %%ranks cells or "
    "cluster.push are gone.":
        "集群会为下一次运行启动新的 rank；%%ranks 单元格或 cluster.push 建立的变量已经没有了。",
    "{label} did not finish within {timeout:g} s on {ranks} (a deadlock: a collective that not "
    "every rank called, a recv without a send, or simply more work than the timeout allows). "
    "Where each rank was:":
        "{label} 在 {ranks} 上 {timeout:g} 秒内没有结束（死锁：某个集合通信不是每个 rank 都调用了，"
        "或 recv 没有对应的 send，也可能只是工作量超过了超时时间）。各 rank 当时所在的位置：",
    "{ranks}: finished.": "{ranks}：已完成。",
    "The stuck ranks were stopped; the cluster starts fresh ranks for the next run (variables "
    "made by %%ranks cells are gone). Pass timeout=... to cluster.run for longer work.":
        "卡住的 rank 已被停止；集群会为下一次运行启动新的 rank（%%ranks 单元格建立的变量已经没有了）。"
        "工作量更大时，给 cluster.run 传 timeout=...。",

    # -- table headers (labkit/tables.py translates whole header cells, titles and notes) ------
    "category": "类别",
    "share": "占比",
    "held on": "存放在",
    "total": "合计",
    "measured - formula": "实测 - 公式",
    "phase": "阶段",
    "step": "步",
    "sends": "发送",
    "receives": "接收",
    "bytes sent": "发送字节",
    "start (ms)": "开始 (ms)",
    "took (ms)": "耗时 (ms)",
    "sent / S": "发送 / S",
    "received / S": "接收 / S",
    "formula / S": "公式 / S",
    "sent - formula": "发送 - 公式",
    "messages sent": "发送消息数",
    "size": "大小",
    "time (us)": "时间 (us)",

    # -- figures: notebook 00 (labkit.show.before_after) ---------------------------------------
    "before": "调用前",
    "after": "调用后",
    "value (one scale, before and after)": "数值（前后同一色标）",
    "broadcast from rank 0": "从 rank 0 broadcast（广播）",
    "all_reduce (sum)": "all_reduce（求和）",
    "reduce_scatter: each rank keeps 1/N of the sum": "reduce_scatter：每个 rank 保留和的 1/N",
    "all_gather: concatenate every rank's piece": "all_gather：把每个 rank 的分片拼接起来",
    "send / recv: rank 0 -> rank 1 (ranks 2, 3 idle)": "send / recv：rank 0 -> rank 1（rank 2、3 空闲）",
}

# The rest of the catalog, one file per part of the course (each file: English key -> Chinese).
# A key in two files must say the same thing (tests/test_i18n.py), so the order does not matter.
PARTS = (
    "zh_check",      # the checkers of notebooks 03 (DDP) and 04 (ZeRO)
    "zh_versions",   # labkit/versions.py: the tested torch release
    "zh_figures",    # the library's figures for notebooks 00-04
    "zh_m02",        # notebook 02: collectives and the ring (checkers, tables, figures)
    "zh_m0506",      # notebooks 05a/05b (FSDP) and 06 (tensor parallelism)
    "zh_m07",        # notebook 07: pipeline schedules; and the list separator ", "
    "zh_m081011",    # notebooks 08 (planning), 10 (throughput), 11 (pitfalls); 01, 03, 04 leftovers
    "zh_m09",        # notebook 09: memory tricks
    "zh_m1213",      # notebooks 12 (context parallelism) and 13 (expert parallelism)
    "zh_machine",    # the learner's machine (labkit/machine.py) and notebook 09's bf16 speed verdict
    "zh_runtime",    # the runtime's hangs, leaks and argument checks (issue 39)
    "zh_m14",        # notebook 14: the capstone's grid and gradient-reduction checker
    "zh_m14_measure",  # notebook 14, section 5: the capstone's step measured (labkit/capstone/plots.py)
)


def _merge() -> None:
    import importlib
    for part in PARTS:
        MESSAGES.update(importlib.import_module(f"labkit.i18n.{part}").MESSAGES)


_merge()
