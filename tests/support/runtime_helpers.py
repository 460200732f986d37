"""Small helpers shared by the runtime tests (test_runtime_*.py)."""
import glob
import os
import subprocess
import tempfile
import threading
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
    except (FileNotFoundError, ProcessLookupError):     # (ESRCH: it ended between open and read)
        return True


def children() -> set:
    """The pids (as strings) of this test process's children."""
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout
    return set(out.split())


def own_dirs() -> set:
    """The cluster folders (/tmp/labkit-<pid>-*) this test process made."""
    return {d for d in glob.glob(os.path.join(tempfile.gettempdir(), "labkit-*"))
            if f"-{os.getpid()}-" in os.path.basename(d)}


def accept_threads() -> int:
    """Control servers' accept threads alive in this process (other clusters may be open)."""
    return sum(t.name == "labkit-accept" for t in threading.enumerate())


def nothing_left(kids, dirs, accepting, what: str = "") -> None:
    """No process, accept thread or folder beyond those counted before (waits up to 5 s). Fewer
    accept threads than before is no leak: a cluster closed before the count may end its thread
    during the test (under load it took that long: 3 counted, 2 after)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5 and (children() - kids or accept_threads() > accepting):
        time.sleep(0.05)
    assert children() - kids == set(), f"processes left behind{what}"
    left = accept_threads()
    assert left <= accepting, f"accept threads left behind{what}: {left} alive, {accepting} before"
    assert own_dirs() - dirs == set(), f"folders left behind{what}"
