"""The runtime's messages added for issue 39 (hangs, leaks, arguments checked up front):
labkit/runtime/cluster.py, collect.py, magic.py, options.py, output.py, local/pool.py,
local/procs.py, local/zygote.py. English -> Chinese, the same format fields."""

MESSAGES = {
    # -- Ctrl-C (cluster.py) --------------------------------------------------------------------
    "interrupted: the {n} ranks were stopped; the next run starts fresh ones":
        "已中断：{n} 个 rank 都被停止了；下一次运行会启动新的 rank",
    "interrupted: {what} was stopped and the {n} ranks with it; the next run starts fresh ones":
        "已中断：{what} 被停止了，{n} 个 rank 也随之停止；下一次运行会启动新的 rank",
    "labkit: event callback {cb} failed: {error}; removed (the run goes on)":
        "labkit：事件回调 {cb} 出错：{error}；已移除（运行继续）",
    "Cluster.remote takes its world size from nnodes x nproc_per_node and its ranks from "
    "torchrun: no world_size= or source=":
        "Cluster.remote 的 world size 由 nnodes x nproc_per_node 决定，rank 由 torchrun 启动："
        "不要传 world_size= 或 source=",

    # -- events (collect.py) --------------------------------------------------------------------
    "labkit: rank {rank}: an event was dropped: the notebook cannot read its field {field!r} "
    "({error}). Emit plain numbers, strings, lists or dicts, or objects of classes the notebook "
    "can import.":
        "labkit：rank {rank}：丢弃了一个事件：notebook 读不出它的字段 {field!r}（{error}）。"
        "请发送普通的数字、字符串、列表或字典，或者 notebook 能导入的类的对象。",

    # -- the pool, the zygote, the machine (local/) -----------------------------------------------
    "labkit: ranks start as fresh interpreters here ({why}): a process that a rank starts in a "
    "session of its own (setsid, subprocess.Popen(start_new_session=True)) is not stopped with "
    "its rank or the cluster; end such processes yourself.":
        "labkit：这里的 rank 以全新的解释器启动（{why}）：rank 在自己的会话里启动的进程"
        "（setsid、subprocess.Popen(start_new_session=True)）不会随 rank 或集群一起停止；"
        "请自己结束这些进程。",
    "labkit: the process that forks ranks quickly has stopped ({how}); new ranks start as fresh "
    "interpreters (2-10 s each).":
        "labkit：快速 fork rank 的进程已经停止（{how}）；新的 rank 改为以全新的解释器启动"
        "（每个 2-10 秒）。",
    "labkit: the process that forks ranks quickly (pid {pid}) is stopped (SIGSTOP or a "
    "debugger); it is ended and new ranks start as fresh interpreters (2-10 s each).":
        "labkit：快速 fork rank 的进程（pid {pid}）被暂停了（SIGSTOP 或调试器）；它已被结束，"
        "新的 rank 改为以全新的解释器启动（每个 2-10 秒）。",
    "world_size={world_size} is more ranks than this machine can run: it has {cores} cores and "
    "{gb} GB of memory available; labkit runs at most {per_core} ranks per core ({most} here) "
    "and needs about {mb} MB per process ({processes} processes with the spares: "
    "{need_gb:.1f} GB). Ask for fewer ranks (the course needs at most 8), fewer spares "
    "(spares=0), or ranks on other machines (Cluster.remote).":
        "world_size={world_size} 超出了这台机器能运行的 rank 数：它有 {cores} 个核心、"
        "{gb} GB 可用内存；labkit 每个核心最多运行 {per_core} 个 rank（这里是 {most} 个），"
        "每个进程约需 {mb} MB（连同备用进程共 {processes} 个：{need_gb:.1f} GB）。"
        "请减少 rank 数（本课程最多需要 8 个）、减少备用进程（spares=0），"
        "或使用其他机器上的 rank（Cluster.remote）。",

    # -- output (output.py) ---------------------------------------------------------------------
    "... {n:,} bytes of a line without a newline not shown (at most {limit:,} bytes per rank "
    "per run: cluster.output_bytes)":
        "……一行没有换行符的输出中有 {n:,} 字节未显示（每个 rank 每次运行最多 {limit:,} 字节："
        "cluster.output_bytes）",
    "(torch's C++ log: {n:,} lines folded, e.g. {key}; the first {kept:,} of them: "
    "cluster.native_log({rank}), at most cluster.output_lines / cluster.output_bytes)":
        "（torch 的 C++ 日志：折叠了 {n:,} 行，例如 {key}；前 {kept:,} 行见 "
        "cluster.native_log({rank})，最多 cluster.output_lines / cluster.output_bytes）",

    # -- %%ranks (magic.py) ---------------------------------------------------------------------
    "%%ranks options: -c CLUSTER_VARIABLE, -t TIMEOUT_SECONDS (a positive number), -q; "
    "got {line!r}":
        "%%ranks 的选项：-c 集群变量名、-t 超时秒数（正数）、-q；收到的是 {line!r}",
    "%%ranks -c {name}: {name} is a {type}, not a labkit.Cluster (give the name of a variable "
    "that holds one, e.g. -c cluster)":
        "%%ranks -c {name}：{name} 是 {type}，不是 labkit.Cluster（请给出保存集群的变量名，"
        "例如 -c cluster）",

    # -- arguments checked up front (options.py) ------------------------------------------------
    "{name} must be {allowed}, got {value!r}": "{name} 必须是{allowed}，收到的是 {value!r}",
    "{what} >= {minimum}": "{what}（>= {minimum}）",
    "{allowed} or None ({means})": "{allowed}或 None（{means}）",
    "no limit": "不限",
    "as many as world_size": "与 world_size 相同",
    "a whole number": "整数",
    "a whole number of lines": "整数行数",
    "a whole number of bytes": "整数字节数",
    "a whole number of events": "整数个事件",
    "a whole number of standby workers": "整数个备用进程",
    "a whole number of machines": "整数台机器",
    "a whole number of ranks per machine": "每台机器上的整数个 rank",
    "a whole number of restarts": "整数次重启",
    "env= must be a dict of names to strings, like {example}; got {value!r}":
        "env= 必须是从变量名到字符串的字典，例如 {example}；收到的是 {value!r}",
    "env= maps names to strings, like {example}; got {key!r}: {value!r}":
        "env= 是从变量名到字符串的映射，例如 {example}；收到的是 {key!r}: {value!r}",
    "env= has a name the system refuses: {key!r} (a name must not be empty or contain '=' or a "
    "NUL character), like {example}":
        "env= 里有系统不接受的变量名：{key!r}（变量名不能为空，也不能含 '=' 或 NUL 字符），"
        "应当像 {example}",
    "env= has a value the system refuses: {key}={value!r} (a value must not contain a NUL "
    "character)":
        "env= 里有系统不接受的值：{key}={value!r}（值不能含 NUL 字符）",
    "listen= takes 'HOST:PORT' (e.g. '0.0.0.0:29500'), got {value!r}":
        "listen= 的格式是 'HOST:PORT'（例如 '0.0.0.0:29500'），收到的是 {value!r}",
    "tls must be True or False, got {value!r}": "tls 必须是 True 或 False，收到的是 {value!r}",
    "{name} must be a string or None, got {value!r}": "{name} 必须是字符串或 None，收到的是 {value!r}",
    # -- where a rank is (stacks.py) --------------------------------------------------------------
    "in {name}() (most recent call last):": "{name}() 里（最近的调用在最后）：",
    "idle (waiting for work)": "空闲（等待任务）",
}
