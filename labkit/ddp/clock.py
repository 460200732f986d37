"""Time stamps for a DDP step's timeline, on the CPU or on a GPU (layer 3).

What a stamp measures depends on where the work runs:

- `HostClock` (CPU ranks, gloo): `time.perf_counter()` when the Python code ran. gloo runs a
  collective in its own CPU threads and completes the work's future when the all-reduce has
  finished, so a stamp taken in the future's callback is the all-reduce's end; a gradient's
  stamp (taken in its hook, after autograd computed it) is when it was ready. perf_counter is
  CLOCK_MONOTONIC: one clock for every process on the machine, so ranks compare directly.
- `CudaClock` (GPU ranks, NCCL): kernel launches return at once and NCCL completes a work's
  future when the collective is *enqueued*, so host times would measure CPU dispatch, not the
  GPU. Each stamp records a CUDA event on the current stream instead: a gradient's stamp
  fires when the kernels before it on the compute stream have run (the gradient exists on the
  GPU); a bucket's launch stamp when the compute stream reaches the launch (NCCL's stream
  waits for that point); its end stamp is recorded inside the future's callback, which torch
  runs on a stream made to wait for the collective, so it fires when the all-reduce has
  finished on the GPU. `resolve` (after a synchronize) places every event on the host's
  perf_counter axis through one origin event recorded at construction; across GPUs that
  alignment is good to the origin's launch delay (microseconds), not to the nanosecond.
  This path needs a GPU and is not exercised by the CPU tests. The clocks live in
labkit/trace.py (the one measuring seam); they are importable here as before.
"""
from labkit.trace import CudaClock, HostClock, clock_for  # noqa: F401
