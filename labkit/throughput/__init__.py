"""Why is training slow? The notes' diagnosis order as a tool, and the data bottleneck (notebook 10).

    from labkit.throughput import diagnose, bottleneck, report, Phases
    findings = diagnose([phases_rank0, phases_rank1], peak_bytes=..., budget_bytes=...)
    bottleneck(findings)                         # "data", "communication", "memory" or "none"

- `verdict` (pure): the four checks in the notes' order, thresholds (30 % communication);
- `knobs` (pure): the tuning knobs and where the course measures each;
- `steps`: a training step timed phase by phase on each rank, three deliberately slow runs;
- `data`: a dataset whose items wait like file reads, DataLoader workers swept, and a stream
  sharded across ranks and workers;
- `profile`: the communication share read from torch.profiler.
"""
from labkit._lazy import lazy
from labkit.throughput.knobs import KNOBS, knob_table
from labkit.throughput.verdict import (BUSY_LOW, COMM_SHARE, DATA_WAIT, MEMORY_NEAR, PHASES, Finding,
                                     Phases, bottleneck, breakdown_table, diagnose, report)

_LAZY = {  # these import torch: only on first use
    "timed_run": "steps", "scenario": "steps", "profiled_scenario": "steps", "SCENARIOS": "steps", "MEMORY_BUDGET": "steps",
    "SlowDataset": "data", "loader_throughput": "data", "ShardedStream": "data",
    "stream_items": "data", "profiled_comm_share": "profile",
}

__all__ = ["KNOBS", "knob_table", "BUSY_LOW", "COMM_SHARE", "DATA_WAIT", "MEMORY_NEAR", "PHASES",
           "Finding", "Phases", "bottleneck", "breakdown_table", "diagnose", "report", *_LAZY]

__getattr__, __dir__ = lazy(__name__, _LAZY)
