"""Chinese catalog: the learner's machine (labkit/machine.py, `python -m labkit.machine`, notebook
00) and notebook 09's bf16 speed verdict (labkit/tricks/precision.py). Merged by labkit.i18n.zh (PARTS)."""

MESSAGES = {
    # -- labkit/machine.py ----------------------------------------------------------------------
    "The machine this course runs on": "本课程运行所在的机器",
    "CPU: {model} ({arch}), {cores} core(s) for this notebook": "CPU：{model}（{arch}），本笔记本可用 {cores} 个核",
    "torch {v}: its CPU kernels use {cap} (torch.backends.cpu.get_cpu_capability(){env})":
        "torch {v}：它的 CPU kernel 使用 {cap}（torch.backends.cpu.get_cpu_capability(){env}）",
    "bf16 matrix products: native ({flags} in the CPU's flags; oneDNN has bf16 kernels)":
        "bf16 矩阵乘法：原生指令（CPU 标志里有 {flags}；oneDNN 有 bf16 kernel）",
    "bf16 matrix products: converted to fp32 by oneDNN ({why})":
        "bf16 矩阵乘法：由 oneDNN 转换成 fp32 计算（{why}）",
    "ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN below its bf16 instructions":
        "ONEDNN_MAX_CPU_ISA={cap} 不让 oneDNN 用到 bf16 指令",
    "no avx512_bf16 or amx_bf16 in the CPU's flags": "CPU 标志里没有 avx512_bf16 或 amx_bf16",
    "bf16 matrix products: emulated by torch's generic loop (oneDNN reports no bf16 support "
    "on this CPU{cap})":
        "bf16 矩阵乘法：由 torch 的通用循环模拟（oneDNN 报告这台 CPU 不支持 bf16{cap}）",
    "bf16 matrix products: no prediction for a {arch} CPU (bf16 in its features: {has}; "
    "oneDNN bf16: {mk})":
        "bf16 矩阵乘法：对 {arch} CPU 不做预测（它的特性里有 bf16：{has}；oneDNN bf16：{mk}）",
    "fp16 matrix products: native ({flags}; oneDNN has fp16 kernels)":
        "fp16 矩阵乘法：原生指令（{flags}；oneDNN 有 fp16 kernel）",
    "fp16 matrix products: emulated by torch's generic loop (no avx512_fp16 or amx_fp16 "
    "that oneDNN uses here)":
        "fp16 矩阵乘法：由 torch 的通用循环模拟（这里没有 oneDNN 可用的 avx512_fp16 或 amx_fp16）",
    "fp16 matrix products: no prediction for a {arch} CPU (fp16 in its features: {has})":
        "fp16 矩阵乘法：对 {arch} CPU 不做预测（它的特性里的 fp16：{has}）",
    "GPUs visible: {n}{names}": "可见的 GPU：{n}{names}",
    "Cluster({n}): backend {b}, {t} thread(s) per rank, {g} GPU(s) per rank":
        "Cluster({n})：后端 {b}，每个 rank {t} 个线程，每个 rank {g} 张卡",
    "gloo on the CPU: no GPU visible (backend='auto' needs one GPU per rank for NCCL)":
        "在 CPU 上用 gloo：没有可见的 GPU（backend='auto' 要每个 rank 一张卡才选 NCCL）",
    "NCCL: one visible GPU per rank": "NCCL：每个 rank 一张可见的卡",
    "What changes on this machine:": "在这台机器上有所不同的内容：",
    "bf16 is faster than fp32 here (native bf16 instructions); it halves the bytes everywhere "
    "(notebook 09 section 1 measures both)":
        "在这里 bf16 比 fp32 快（原生 bf16 指令）；在任何机器上它都把字节数减半（第 09 笔记本第 1 节两者都实测）",
    "bf16 is about as fast as fp32 here or somewhat slower, not faster (no bf16 "
    "instructions: oneDNN converts); it still halves the bytes (notebook 09 section 1)":
        "在这里 bf16 和 fp32 差不多快或略慢，并不更快（没有 bf16 指令：oneDNN 做转换）；"
        "它仍然把字节数减半（第 09 笔记本第 1 节）",
    "bf16 is many times slower than fp32 here (no bf16 kernels), though it halves the "
    "bytes: bf16 runs in the notebooks are slow for that reason (notebook 09 section 1)":
        "在这里 bf16 比 fp32 慢很多倍（没有 bf16 kernel），尽管它把字节数减半："
        "笔记本里 bf16 的运行慢就是这个原因（第 09 笔记本第 1 节）",
    "bf16's speed here is not predicted: notebook 09 section 1 measures it; it halves "
    "the bytes everywhere":
        "这里不预测 bf16 的速度：第 09 笔记本第 1 节实测它；在任何机器上它都把字节数减半",
    "fp16 matrix products are slow on this CPU: notebook 09 section 7 teaches fp16's "
    "range and loss scaling, not its speed (on a GPU fp16 runs on tensor cores)":
        "在这台 CPU 上 fp16 矩阵乘法很慢：第 09 笔记本第 7 节讲的是 fp16 的范围和损失缩放，"
        "而不是它的速度（在 GPU 上 fp16 跑在 tensor core 上）",
    "{n} ranks share {cores} core(s): a rank waits for a core, so timings move from "
    "run to run; read every time with its spread; bytes, FLOPs and calls are exact":
        "{n} 个 rank 共用 {cores} 个核：rank 要等核空出来，所以计时每次都会变；"
        "每个时间都要连同它的波动范围来读；字节数、FLOPs 和调用次数是精确的",
    "each of {n} ranks has {t} thread(s) of its own: timings are steadier, still read "
    "them with their spread":
        "{n} 个 rank 各有自己的 {t} 个线程：计时更稳定，但仍要连同波动范围来读",
    "NCCL on GPUs: the overlap of communication with compute and the bus bandwidth "
    "are your GPUs' links, measured in notebooks 02 and 03: expect other ratios than a CPU's":
        "GPU 上的 NCCL：通信与计算的重叠和总线带宽取决于你的卡之间的链路，在第 02 和 03 笔记本里实测："
        "比值会和 CPU 上的不同",
    "no GPU for the ranks: NCCL, tensor cores and PCIe copies (offload) are described, "
    "not measured; gloo's bandwidth is this machine's memory and loopback":
        "rank 没有 GPU：NCCL、tensor core 和 PCIe 拷贝（offload）只做说明，不做实测；"
        "gloo 的带宽是这台机器的内存和回环网络的带宽",
    # -- notebook 09: bf16 speed, measured against what the CPU's kind predicts (precision.py) --
    "bf16 took {lo:.2f}x to {hi:.2f}x fp32's median on this CPU (no prediction is made for "
    "this kind of CPU: this is the measurement)":
        "在这台 CPU 上 bf16 用时是 fp32 中位数的 {lo:.2f} 到 {hi:.2f} 倍（对这类 CPU 不做预测：这就是实测值）",
    "with bf16 instructions bf16 is the faster one": "有 bf16 指令时，bf16 更快",
    "oneDNN converts bf16 to fp32 here: bf16 is about as fast as fp32 or somewhat "
    "slower, not faster":
        "这里 oneDNN 把 bf16 转成 fp32 计算：bf16 和 fp32 差不多快或略慢，并不更快",
    "without bf16 kernels torch runs a generic loop: bf16 is many times slower":
        "没有 bf16 kernel 时 torch 用通用循环：bf16 慢很多倍",
    "over {a:g}x": "高于 {a:g} 倍",
    "below {b:g}x": "低于 {b:g} 倍",
    "between {a:g}x and {b:g}x": "在 {a:g} 倍到 {b:g} 倍之间",
    "{lesson}: bf16 took {lo:.2f}x to {hi:.2f}x fp32's median on every rank (this CPU's kind, "
    "{kind}, predicts {want})":
        "{lesson}：在每个 rank 上 bf16 用时是 fp32 中位数的 {lo:.2f} 到 {hi:.2f} 倍"
        "（这台 CPU 的类别 {kind} 预测的是{want}）",
}
