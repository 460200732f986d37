"""Chinese catalog, part 3: text in the library's figures for notebooks 00-04 (titles, axis
labels, legends). Merged into `labkit.i18n.zh.MESSAGES`, same rules."""

MESSAGES = {
    # -- notebook 01: memory (labkit/memory/plots.py, live.py) ---------------------------------
    "memory per rank": "每个 rank 的显存",
    "memory per rank, live (labkit.emit)": "每个 rank 的显存，实时（labkit.emit）",
    "GPU": "卡",
    "rank": "rank",
    "{name} per {per}": "每{per} {name}",
    "GB per {per} (log scale)": "每{per} GB（对数坐标）",
    "total per {per}": "每{per}合计",
    "measured | formula": "实测 | 公式",
    "above each pair: measured - formula": "每对柱子上方：实测 - 公式",
    "formula": "公式",
    "measured": "实测",

    # -- notebook 02: the ring (labkit/comm/draw.py) -------------------------------------------
    "ring formula 2(N-1)/N": "ring 公式 2(N-1)/N",
    "naive root N-1": "朴素 root N-1",
    "naive root formula N-1": "朴素 all-reduce 的 root 公式 N-1",
    "naive others 1": "朴素 其他 rank 1",
    "naive non-root formula 1": "朴素 all-reduce 的非 root 公式 1",
    "ring limit 2 (N large)": "ring 极限 2（N 很大时）",
    "{op}: measured": "{op}：实测",
    "{op}: measured, each rank": "{op}：实测，每个 rank",
    "number of ranks N": "rank 数 N",
    "bytes sent by a rank / S": "一个 rank 发送的字节 / S",
    "bytes per rank in one all-reduce of S bytes": "一次 S 字节 all-reduce 中每个 rank 的通信量",
    "traffic per rank in one all-reduce of S bytes (kernel TCP counters)":
        "一次 S 字节 all-reduce 中每个 rank 的通信量（操作系统内核 TCP 计数器）",

    # -- notebook 03: DDP's step timeline (labkit/ddp/timeline.py) -----------------------------
    "{label}: {n} buckets, step {step:.0f} ms, overlap {mean:.0%} (mean over ranks)":
        "{label}：{n} 个桶，一步 {step:.0f} ms，重叠 {mean:.0%}（各 rank 平均）",
    "{label}: {n} bucket, step {step:.0f} ms, overlap {mean:.0%} (mean over ranks)":
        "{label}：{n} 个桶，一步 {step:.0f} ms，重叠 {mean:.0%}（各 rank 平均）",
    "ms since the step started (same scale in every panel)": "从这一步开始起的毫秒数（各面板同一刻度）",
    "forward": "前向",
    "backward": "反向",
    "all-reduce running (one bar per bucket)": "all-reduce 进行中（每个桶一条）",
    "all-reduce launched, waiting for a slower rank": "all-reduce 已启动，在等较慢的 rank",
    "bucket launched": "桶启动",
    "gradients synced": "梯度同步完成",

    # -- notebook 04: ZeRO (labkit/zero/plots.py) ----------------------------------------------
    "sent / parameter bytes": "发送 / 参数字节",
    "bytes sent per rank per step\n/ parameter bytes": "每个 rank 每步发送的字节\n/ 参数字节",
    "one step, N={n}": "一步，N={n}",
    "traffic per step, N={n}: 2(N-1)/N = {two:.2f}, 3(N-1)/N = {three:.2f}":
        "每步通信量，N={n}：2(N-1)/N = {two:.2f}，3(N-1)/N = {three:.2f}",
    "sent / tensor bytes": "发送 / 张量字节",
    "bytes sent / tensor bytes": "发送的字节 / 张量字节",
    "one collective on gloo, N={n}": "gloo 上的一次集合通信，N={n}",
    "ZeRO-{s} formula": "ZeRO-{s} 公式",
    "90 % of {lim:g}x at N={n}": "N={n} 时达到 {lim:g}x 的 90 %",
    "measured (N = {ns})": "实测（N = {ns}）",
    "data-parallel ranks N": "数据并行的 rank 数 N",
    "model state: DDP / ZeRO (x less)": "模型状态：DDP / ZeRO（省了几倍）",
    "ZeRO savings per rank, {precision} Adam (ZeRO-3's is exactly N)":
        "ZeRO 每个 rank 省下的显存，{precision} Adam（ZeRO-3 恰好是 N）",
    "ms since the step started (rank 0)": "从这一步开始起的毫秒数（rank 0）",
    # the log-scale memory plot's legend (labkit/memory/plots.py, _plot_groups_log)
    "gradients": "梯度",
    "optimizer state": "优化器状态",
}
