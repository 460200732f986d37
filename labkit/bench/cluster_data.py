"""Parts of `python -m labkit.bench cluster`: moving big tensors, and the standby after failures.

Memory metric ("tree memory"): every 20 ms, the sum of the proportional set size (Pss, from
/proc/<pid>/smaps_rollup) of the driver, its workers and the zygote, plus labkit's shared-memory
files that a process holds open but nobody maps. Pss divides a page shared by k processes by k,
so a tensor that 4 ranks map once counts once (RSS would count it 4 times), and pages the
forked workers still share with their zygote count once. The figure reported is the peak
during one transfer minus the value just before it: the memory the transfer itself needed.
"""
import os
import threading
import time


def _pss(pid: int) -> int:
    from labkit.runtime import portable
    if not portable.PROC:                         # macOS, LABKIT_PORTABLE=1: no Pss to read
        raise RuntimeError("the memory columns read /proc/<pid>/smaps_rollup (Linux): "
                           + portable.why_not("/proc") + "; the times do not need it: run "
                           "`python -m labkit.bench cluster` without --only data/standby")
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _held_not_mapped(pids) -> int:
    """Bytes of labkit shared-memory files held open by an fd that no process of `pids` maps."""
    held, mapped = {}, set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/maps") as f:
                mapped.update(int(ln.split()[4]) for ln in f if "memfd:labkit" in ln)
        except OSError:
            continue
        for fd in fds:
            try:
                if "memfd:labkit" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    held[st.st_ino] = st.st_blocks * 512
            except OSError:
                pass
    return sum(b for ino, b in held.items() if ino not in mapped)


def tree_pids(cluster) -> list:
    pids = [os.getpid()] + list(cluster.source.pool.workers)
    z = cluster.source.pool.zygote
    if z is not None and z.proc.poll() is None:
        pids.append(z.proc.pid)
    return pids


def tree_memory(cluster) -> int:
    pids = tree_pids(cluster)
    return sum(_pss(p) for p in pids) + _held_not_mapped(pids)


class PeakSampler:
    """`with PeakSampler(cluster) as s: ...` then s.extra: peak tree memory above the start."""

    def __init__(self, cluster, every: float = 0.02):
        self.cluster, self.every = cluster, every

    def __enter__(self):
        self.start = self.peak = tree_memory(self.cluster)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, tree_memory(self.cluster))

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_memory(self.cluster))
        self.extra = self.peak - self.start


def _touch(t):
    return float(t[:: 1 << 20].sum())             # read the argument (a page per MB)


def transfers(world_size: int, result_mb: int, push_mb: int, arg_mb: int, shm: bool) -> dict:
    """GB/s and extra peak memory of: a result of `result_mb` from every rank (pull), a push
    of `push_mb`, a run with an argument of `arg_mb`. shm=False: the pickled path (before)."""
    import torch
    import labkit
    os.environ["LABKIT_SHM"] = "1" if shm else "0"
    from labkit.runtime import shm as shm_mod
    shm_mod.ENABLED = shm and shm_mod._probe()
    out = {}
    try:
        with labkit.Cluster(world_size, backend="gloo", spares=0) as c:
            n = result_mb * 2**20 // 4
            c.exec_cell(f"big = torch.ones({n})", "<bench>")
            with PeakSampler(c) as s:
                t0 = time.perf_counter()
                got = c.pull("big")
                dt = time.perf_counter() - t0
            assert all(g.shape == (n,) for g in got)
            out["result"] = (world_size * result_mb / 1024 / dt, s.extra, dt)
            del got
            c.exec_cell("del big", "<bench>")
            x = torch.ones(push_mb * 2**20 // 4)
            with PeakSampler(c) as s:
                t0 = time.perf_counter()
                c.push(x=x)
                dt = time.perf_counter() - t0
            out["push"] = (push_mb / 1024 / dt, s.extra, dt)
            c.exec_cell("del x", "<bench>")
            del x
            if arg_mb:
                a = torch.ones(arg_mb * 2**20 // 4)
                with PeakSampler(c) as s:
                    t0 = time.perf_counter()
                    c.run(_touch, a)
                    dt = time.perf_counter() - t0
                out["arg"] = (arg_mb / 1024 / dt, s.extra, dt)
                del a
    finally:
        os.environ.pop("LABKIT_SHM", None)
        shm_mod.ENABLED = shm_mod._probe()
    return out


def _crash():
    import os
    import torch
    import labkit
    if labkit.rank() == 1:
        os._exit(3)
    torch.distributed.all_reduce(torch.ones(1))


def _hang():
    import torch
    import labkit
    if labkit.rank() == 0:
        torch.distributed.recv(torch.zeros(1), src=1)


def _sleep():
    import time
    time.sleep(30)


FAILURES = ("crash", "hang", "interrupt")


def fail(c, how: str) -> None:
    """Make the cluster `c`'s run fail one way of FAILURES: rank 1 exits, rank 0 waits for a
    message that never comes (the run's timeout: 0.5 s), or Ctrl-C (SIGINT to this process)
    during a sleep; the error is swallowed, so the caller can time the recovery."""
    import signal

    import labkit
    try:
        if how == "crash":
            c.run(_crash)
        elif how == "hang":
            c.run(_hang, timeout=0.5)
        else:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            c.run(_sleep)
    except (labkit.RankError, KeyboardInterrupt):
        pass


def _tiny():
    import torch
    t = torch.ones(1)
    torch.distributed.all_reduce(t)
    return t.item()


def standby(world_size: int, spares: int, use_zygote: bool) -> dict:
    """Three failures in a row (crash, hang, interrupt), each followed at once by a run:
    seconds from the failure being reported to the next run's result; and the idle memory
    (Pss) of the spare workers and the zygote."""
    import labkit
    from labkit.runtime.local import zygote
    saved = zygote.ENABLED
    zygote.ENABLED = use_zygote and saved
    try:
        with labkit.Cluster(world_size, backend="gloo", spares=spares, timeout=60) as c:
            c.run(_tiny)
            c.wait_for_spares()
            time.sleep(0.5)
            spare_pss = [_pss(w.pid) for w in c.source.pool.spares]
            rank_pss = [_pss(w.pid) for w in c.ranks]
            z = c.source.pool.zygote
            zyg_pss = _pss(z.proc.pid) if z is not None else 0
            times = []
            for how in FAILURES:
                fail(c, how)
                t0 = time.perf_counter()
                c.run(_tiny)
                times.append(time.perf_counter() - t0)
            return {"times": times, "spare_pss": spare_pss, "rank_pss": rank_pss,
                    "zygote_pss": zyg_pss, "forked": c.source.pool.forked}
    finally:
        zygote.ENABLED = saved
