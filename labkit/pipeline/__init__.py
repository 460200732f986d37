"""Pipeline parallelism: schedules as data, checked, simulated, and run on real ranks.

    from labkit.pipeline import one_f_one_b, validate, simulate, bubble_ratio
    s = one_f_one_b(4, 8)                    # per-stage action lists: F0 F1 F2 B0 F3 B1 ...
    validate(s)                              # [] or "deadlock: stage 1 waits at step 3 (F2) for ..."
    simulate(s).bubble                       # 0.273 = bubble_ratio(4, 8) = (p-1)/(m+p-1)

Pure files (formulas, schedules, validate, simulate) import neither torch nor the runtime.
The executor (`labkit.pipeline.executor`), the torch.distributed.pipelining comparison
(`labkit.pipeline.torch_pp`) and the pictures (`labkit.pipeline.plots`, `.widgets`) load on use.
"""
from labkit.pipeline.formulas import (bubble_over_ideal, bubble_ratio, first_stage_activations, ideal_time,
                                      interleaved_memory_factor, pipeline_time)
from labkit.pipeline.schedules import (SCHEDULES, Action, B, F, I, Schedule, W, build, compute_only,
                                       gpipe, interleaved_1f1b, one_f_one_b, with_comms, zb_h1)
from labkit.pipeline.simulate import Timeline, bubble_of, held_in_order, peak_in_flight, simulate
from labkit.pipeline.validate import ScheduleError, as_schedule, ensure_valid, play, validate

__all__ = ["bubble_ratio", "bubble_over_ideal", "ideal_time", "pipeline_time", "interleaved_memory_factor",
           "first_stage_activations", "held_in_order", "Action", "Schedule",
           "F", "B", "I", "W", "gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1", "SCHEDULES", "build",
           "with_comms", "compute_only", "simulate", "Timeline", "bubble_of", "peak_in_flight",
           "validate", "ensure_valid", "ScheduleError", "as_schedule", "play"]
