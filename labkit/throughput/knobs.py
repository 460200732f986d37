"""The notes' tuning knobs (关键调优参数), what each trades, and where the course measures it."""
from labkit.i18n import N_, tr

KNOBS = [
    # (knob, the notes, what it trades, where it is measured)
    ("bucket_cap_mb", N_("DDP gradient bucket size (default 25)"),
     N_("big buckets start their all-reduce late (less overlap); small ones pay a start-up cost each"),
     N_("03 DDP: bucketed DDP, the overlap timeline and torch DDP's bucket sizes")),
    (N_("gradient accumulation"), N_("a large batch from small ones"),
     N_("memory of one micro-batch, fewer optimizer steps; DDP's no_sync sends once per step, "
     "ZeRO-2/3 and FSDP reduce-scatter every micro-batch"),
     N_("03 DDP (equal gradients, no_sync); 09 memory tricks (memory against step time)")),
    (N_("activation checkpointing"), N_("trade compute for activation memory"),
     N_("about one extra forward per step for activations cut to layer inputs"),
     N_("01 memory (Korthikanti formulas); 09 memory tricks (measured)")),
    ("cpu_offload", N_("optimizer state on the CPU (slow, saves memory)"),
     N_("device memory against host-device copies every step"),
     N_("09 memory tricks; 05 FSDP (CPUOffload)")),
    ("prefetch / limit_all_gathers", N_("FSDP communication scheduling"),
     N_("prefetching the next layer's all-gather overlaps it with compute but holds two layers; "
     "limit_all_gathers caps the in-flight gathers to save memory"),
     N_("05 FSDP (forward/backward prefetch)")),
    ("NCCL_IB_DISABLE / NCCL_SOCKET_IFNAME", N_("NCCL's environment variables"),
     N_("NCCL_IB_DISABLE=1 forbids InfiniBand (falls back to TCP sockets: much slower across "
     "nodes); NCCL_SOCKET_IFNAME picks the network interface NCCL's sockets use"),
     N_("needs NCCL and a network: not measurable on CPU ranks; set through Cluster(env={...}), "
     "11 pitfalls shows the debug variables")),
    ("DataLoader num_workers / prefetch_factor / pin_memory", N_("the data bottleneck: more workers, streaming"),
     N_("workers overlap slow reads; prefetch_factor batches queued per worker; pinned memory "
     "makes host-to-GPU copies asynchronous (GPU only)"),
     N_("10 throughput and data (this notebook: workers swept)")),
]

HEADER = (N_("knob"), N_("the notes"), N_("what it trades"), N_("where the course measures it"))


def knob_table() -> str:
    """KNOBS as a Markdown table."""
    rows = [tuple(tr(h) for h in HEADER), ("---",) * 4] + \
        [(f"`{k}`", *(tr(x) for x in rest)) for k, *rest in KNOBS]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)
