"""python -m labkit.bench cluster [--world-size 4] [--calls 300] [--per-call-reps 3]

How fast the persistent Cluster is, against how other notebook launchers do it, in one run:

- cold start: `labkit.Cluster(n)` until every rank has joined the process group;
- round trip of a trivial task with one all_reduce (median, p90), on a warm cluster;
- the same task done by starting fresh processes per call, spawned and forked
  (torch.multiprocessing.start_processes; forking needs torch threads = 1 in the parent);
- recovery: from the moment a failure is reported until the next run has completed, after
  a rank raised (ranks kept), after a rank crashed, and after a hang (ranks replaced by spares);
- standby (--only standby): three failures in a row (crash, hang, interrupt), each followed by
  a run, with workers forked by the zygote against spawned spares (default and 3x as many),
  and the idle memory (Pss) of a spare and of the zygote;
- data (--only data): a tensor returned from every rank, a push, a big argument: GB/s and the
  extra peak memory of the whole process tree (cluster_data.py says how it is measured),
  through shared memory (now) and pickled through the socket (before; LABKIT_SHM=0), the
  "before" at smaller sizes because it needs ~4x the data in memory.
"""
import argparse
import datetime
import os
import statistics
import time


def _tiny():
    import torch
    import torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _per_call_worker(rank: int, world_size: int, port: int) -> None:
    """What a launch-per-call tool does each time: a process group from nothing, then the task."""
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0,    # rank 0 hosts the store
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    _tiny()
    dist.destroy_process_group()


def per_call(method: str, world_size: int) -> float:
    """Seconds for one task when every call starts its own processes."""
    import torch.multiprocessing as mp
    from labkit.runtime.ports import free_port     # (below the ephemeral range: no port race)
    port = free_port()
    t0 = time.perf_counter()
    # No store in this process: a forked child must not inherit a running store thread.
    mp.start_processes(_per_call_worker, args=(world_size, port), nprocs=world_size,
                       start_method=method, join=True)
    return time.perf_counter() - t0


def _boom():
    import labkit
    if labkit.rank() == 1:
        raise ValueError("deliberate")


def _crash():
    import os
    import labkit
    if labkit.rank() == 1:
        os._exit(3)
    import torch
    import torch.distributed as dist
    dist.all_reduce(torch.ones(1))       # the others wait for rank 1, which is gone


def _hang():
    import torch
    import torch.distributed as dist
    import labkit
    if labkit.rank() == 0:
        dist.recv(torch.zeros(1), src=1)  # no matching send


def recovery(cluster, fn, timeout=None) -> tuple:
    """(seconds until the failure was reported, seconds from then until a run completed)."""
    import labkit
    t0 = time.perf_counter()
    try:
        cluster.run(fn, timeout=timeout)
    except labkit.RankError:
        pass
    t1 = time.perf_counter()
    cluster.run(_tiny)
    return t1 - t0, time.perf_counter() - t1


def _print_standby(n: int) -> None:
    from labkit.bench.cluster_data import standby
    rows = [("zygote, spares=world size", standby(n, n, True)),
            ("spawned spares=world size (before)", standby(n, n, False)),
            ("spawned spares=3x world size", standby(n, 3 * n, False))]
    mb = 2**20
    print("\nstandby: 3 failures in a row (crash, hang, interrupt), seconds from the failure "
          "to the next run's result")
    print(f"{'workers':36} {'crash':>7} {'hang':>7} {'Ctrl-C':>7} {'max':>7} {'idle spare Pss':>15} "
          f"{'zygote Pss':>11}")
    base = max(rows[1][1]["times"])
    for name, r in rows:
        t = r["times"]
        spare = sum(r["spare_pss"]) / max(1, len(r["spare_pss"])) / mb
        print(f"{name:36} {t[0]:7.2f} {t[1]:7.2f} {t[2]:7.2f} {max(t):7.2f} {spare:12.0f} MB "
              f"{r['zygote_pss'] / mb:8.0f} MB   ({max(t) / base:.2f}x of before)")


def _print_data(n: int, a) -> None:
    from labkit.bench.cluster_data import transfers
    gb = 2**30
    before = transfers(n, a.before_mb, a.before_mb, a.before_mb, shm=False)
    small = transfers(n, a.before_mb, a.before_mb, a.before_mb, shm=True)
    full = transfers(n, a.result_mb, a.push_mb, a.arg_mb, shm=True)
    print(f"\ndata: {n} ranks; extra peak = tree memory (Pss of driver + workers + zygote, plus "
          "unmapped shared memory) above its value before the transfer")
    print(f"{'transfer':44} {'path':18} {'GB/s':>7} {'extra peak':>11} {'/ data':>7}")
    for key, sizes in (("result", (a.before_mb, a.before_mb, a.result_mb)),
                       ("push", (a.before_mb, a.before_mb, a.push_mb)),
                       ("arg", (a.before_mb, a.before_mb, a.arg_mb))):
        for path, res, size in zip(("pickled (before)", "shared memory", "shared memory"),
                                   (before, small, full), sizes):
            gbs, extra, _ = res[key]
            total = size * (n if key == "result" else 1)
            label = {"result": f"a result of {size} MB from each of {n} ranks",
                     "push": f"push of {size} MB", "arg": f"an argument of {size} MB"}[key]
            print(f"{label:44} {path:18} {gbs:7.2f} {extra / gb:8.2f} GB "
                  f"{extra / (total * 2**20):6.2f}x")
    print(f"speed-up at {a.before_mb} MB: result {small['result'][0] / before['result'][0]:.1f}x, "
          f"push {small['push'][0] / before['push'][0]:.1f}x, "
          f"argument {small['arg'][0] / before['arg'][0]:.1f}x")


def main(argv=None) -> int:
    import torch
    import labkit
    p = argparse.ArgumentParser(prog="python -m labkit.bench cluster")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--calls", type=int, default=300, help="round trips to time")
    p.add_argument("--per-call-reps", type=int, default=3, help="spawn/fork launches to time")
    p.add_argument("--only", choices=("all", "calls", "standby", "data"), default="all")
    p.add_argument("--result-mb", type=int, default=1024, help="tensor returned by each rank")
    p.add_argument("--push-mb", type=int, default=500)
    p.add_argument("--arg-mb", type=int, default=2048, help="argument of one run")
    p.add_argument("--before-mb", type=int, default=256,
                   help="every size of the pickled (before) case: it peaks at ~4x the data")
    a = p.parse_args(argv)
    n = a.world_size
    torch.set_num_threads(1)     # forking after a multi-threaded op hangs; see per_call("fork")
    print(f"labkit.bench cluster: {n} gloo ranks on {os.cpu_count()} cores, torch {torch.__version__}")
    if a.only in ("all", "standby"):
        _print_standby(n)
    if a.only in ("all", "data"):
        _print_data(n, a)
    if a.only not in ("all", "calls"):
        return 0

    t0 = time.perf_counter()
    cluster = labkit.Cluster(n, backend="gloo")
    cold = time.perf_counter() - t0
    cluster.wait_for_spares()
    for _ in range(20):
        cluster.run(_tiny)
    times = []
    for _ in range(a.calls):
        t = time.perf_counter()
        cluster.run(_tiny)
        times.append(time.perf_counter() - t)
    times.sort()
    median, p90 = statistics.median(times), times[int(0.9 * len(times))]

    rec = {}
    for name, fn, timeout in (("a rank raised", _boom, None), ("a rank crashed", _crash, None),
                              ("a hang (timeout 1 s)", _hang, 1.0)):
        cluster.wait_for_spares()
        rec[name] = recovery(cluster, fn, timeout)
    cluster.close()

    spawn = statistics.median(per_call("spawn", n) for _ in range(a.per_call_reps))
    fork = statistics.median(per_call("fork", n) for _ in range(a.per_call_reps))

    print(f"\n{'measure':44} {'time':>12} {'vs labkit median':>18}")
    print(f"{'cold start (all ranks ready)':44} {cold:10.3f} s")
    print(f"{'round trip, labkit Cluster, median':44} {median * 1e3:9.2f} ms {1.0:17.1f}x")
    print(f"{'round trip, labkit Cluster, p90':44} {p90 * 1e3:9.2f} ms {p90 / median:17.1f}x")
    print(f"{'round trip, spawn fresh processes per call':44} {spawn * 1e3:9.1f} ms {spawn / median:17.0f}x")
    print(f"{'round trip, fork fresh processes per call':44} {fork * 1e3:9.1f} ms {fork / median:17.0f}x")
    print(f"\n{'recovery after':24} {'reported after':>15} {'working again after':>20} {'/ cold start':>13}")
    for name, (reported, back) in rec.items():
        print(f"{name:24} {reported:13.3f} s {back:18.3f} s {back / cold:12.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
