"""The notes' tuning knobs (关键调优参数), what each trades, and where the course measures it."""
from labkit.i18n import tr

KNOBS = [
    # (knob, the notes, what it trades, where it is measured)
    ("bucket_cap_mb", "DDP gradient bucket size (default 25)",
     "big buckets start their all-reduce late (less overlap); small ones pay a start-up cost each",
     "03 DDP: bucketed DDP, the overlap timeline and torch DDP's bucket sizes"),
    ("gradient accumulation", "a large batch from small ones",
     "memory of one micro-batch, fewer optimizer steps; DDP's no_sync sends once per step, "
     "ZeRO-2/3 and FSDP reduce-scatter every micro-batch",
     "03 DDP (equal gradients, no_sync); 09 memory tricks (memory against step time)"),
    ("activation checkpointing", "trade compute for activation memory",
     "about one extra forward per step for activations cut to layer inputs",
     "01 memory (Korthikanti formulas); 09 memory tricks (measured)"),
    ("cpu_offload", "optimizer state on the CPU (slow, saves memory)",
     "device memory against host-device copies every step",
     "09 memory tricks; 05 FSDP (CPUOffload)"),
    ("prefetch / limit_all_gathers", "FSDP communication scheduling",
     "prefetching the next layer's all-gather overlaps it with compute but holds two layers; "
     "limit_all_gathers caps the in-flight gathers to save memory",
     "05 FSDP (forward/backward prefetch)"),
    ("NCCL_IB_DISABLE / NCCL_SOCKET_IFNAME", "NCCL's environment variables",
     "NCCL_IB_DISABLE=1 forbids InfiniBand (falls back to TCP sockets: much slower across "
     "nodes); NCCL_SOCKET_IFNAME picks the network interface NCCL's sockets use",
     "needs NCCL and a network: not measurable on CPU ranks; set through Cluster(env={...}), "
     "11 pitfalls shows the debug variables"),
    ("DataLoader num_workers / prefetch_factor / pin_memory", "the data bottleneck: more workers, streaming",
     "workers overlap slow reads; prefetch_factor batches queued per worker; pinned memory "
     "makes host-to-GPU copies asynchronous (GPU only)",
     "10 throughput and data (this notebook: workers swept)"),
]

HEADER = ("knob", "the notes", "what it trades", "where the course measures it")


def knob_table() -> str:
    """KNOBS as a Markdown table."""
    rows = [tuple(tr(h) for h in HEADER), ("---",) * 4] + \
        [(f"`{k}`", *(tr(x) for x in rest)) for k, *rest in KNOBS]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)
