"""Small helpers shared by the runtime tests (test_runtime_*.py)."""
import time


def works(c, timeout: float = 30) -> float:
    """Seconds for a run with a collective to succeed on cluster `c` (asserts the result)."""
    def fn():
        import torch
        import torch.distributed as dist
        t = torch.ones(1)
        dist.all_reduce(t)
        return t.item()
    t0 = time.monotonic()
    assert c.run(fn, timeout=timeout) == [float(c.world_size)] * c.world_size
    return time.monotonic() - t0


def gone(pid: int) -> bool:
    """True once pid has exited (a zombie waiting for init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
