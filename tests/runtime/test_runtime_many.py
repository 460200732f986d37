"""A class on one node: eight learners' kernels, two local users, eight clusters of 4 ranks at once.

Eight Jupyter kernels (four run as lktclass1, four as lktclass2, as JupyterHub's local spawner
would start them) each start `labkit.Cluster(4)` in the same moment and run an all_reduce.
Then, read from /proc as root (not from labkit's own bookkeeping):

- every cluster came up, its ranks run as that kernel's user, and the clusters' lifetimes overlap
  (they really ran at the same time);
- the TCP ports each cluster listens on (its kernel's, minus the kernel's own ZeroMQ ports, and
  its zygote's and ranks') never collide between clusters, and each rank holds one;
- each user's ranks (all four clusters of theirs) are forked by one zygote of that user's own
  (labkit/runtime/local/userzygote.py), a different one for each user;
- after `close()` only the kernels and each user's idle zygote are left, and after the kernels
  shut down the zygotes exit by themselves (their idle time, set to 20 s here) and no process of
  either user is left; no new file of theirs in /tmp, /var/tmp, /dev/shm or their homes (stack
  folders, rendezvous files, shared memory, the zygote's folder).
"""
import json
import pathlib
import tempfile
import time

import pytest

from support import proc_view
from support.sysusers import skip_unless_root
from support.user_kernels import execute_all, shutdown_all, start_kernels

pytestmark = pytest.mark.cluster

USERS = ["lktclass1", "lktclass2"] * 4       # eight kernels, four per user, interleaved
WORLD = 4

IDLE = 20
WARM = (f"import json, os, time\nos.environ['LABKIT_ZYGOTE_IDLE'] = '{IDLE}'\n"
        "import torch, torch.distributed as dist\nimport labkit\nprint('UID', os.getuid())")

START = f"""
def _first(x):
    t = torch.tensor([float(labkit.rank() + x)])
    dist.all_reduce(t)
    return t.item(), os.getuid(), os.getpid()

_t0 = time.time()
cluster = labkit.Cluster({WORLD}, start_timeout=300, timeout=300)
_res = cluster.run(_first, 1)
print('INFO', json.dumps({{"start": _t0, "end": time.time(), "results": _res,
                          "uid": os.getuid(), "kernel": os.getpid()}}))
"""

T0 = [0.0]
CLOSE = "cluster.close()\nprint('CLOSED', cluster)"


def _torch_cache(user: str) -> set:
    """torch's own per-user compile cache folder, made (empty) when the zygote imports FSDP:
    torch's, meant to persist, not the cluster's; allowed only while empty."""
    d = pathlib.Path(tempfile.gettempdir(), f"torchinductor_{user}")
    return {str(d)} if d.is_dir() and not any(d.iterdir()) else set()


def _kernel_history(home) -> set:
    """IPython's history database of the user's kernels (the kernel's, not the cluster's): while
    its history thread writes the last cells, sqlite's journal file is there for a moment."""
    d = pathlib.Path(home, ".ipython", "profile_default")
    return {str(d / f) for f in ("history.sqlite", "history.sqlite-journal")}


def _wait(cond, limit: float) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


@pytest.fixture
def kernels():
    skip_unless_root()
    pytest.importorskip("jupyter_client")
    T0[0] = time.monotonic()
    ks = start_kernels(USERS, timeout=300)
    try:
        yield ks
    finally:
        shutdown_all(ks)


def _cluster_ports(k, fam) -> dict:
    """pid -> listening ports, for the kernel `k` and its cluster's processes (its ZeroMQ ports,
    which the test's KernelManager chose, left out)."""
    ports = proc_view.listening_ports(fam)
    ports[k.pid] = ports.get(k.pid, set()) - k.zmq_ports
    return ports


@pytest.mark.timeout(1200)      # each step has its own limit below; on 2 cores it takes 1-2 minutes
def test_eight_clusters_of_four_from_eight_kernels_of_two_users(kernels):
    uids = {k.user: k.uid for k in kernels}
    homes = {k.user: k.home for k in kernels}
    warm = execute_all(kernels, WARM, timeout=300)
    for k, r in zip(kernels, warm):
        assert r.status == "ok" and r.lines("UID") == [str(k.uid)], (k.user, r)
    before = {u: proc_view.owned_files(uid, homes[u]) for u, uid in uids.items()}

    print(f"kernels ready and torch imported in {time.monotonic() - T0[0]:.1f} s")
    _before_ports = {k.pid: _cluster_ports(k, {k.pid})[k.pid] for k in kernels}
    t0 = time.monotonic()
    replies = execute_all(kernels, START, timeout=420)
    took = time.monotonic() - t0
    infos = []
    for k, r in zip(kernels, replies):
        assert r.status == "ok" and not r.error, f"{k.user}'s cluster (kernel pid {k.pid}):\n{r}"
        info = json.loads(r.lines("INFO")[0])
        want = sum(range(1, WORLD + 1))              # ranks add rank+1: 1+2+3+4
        assert [v for v, _, _ in info["results"]] == [want] * WORLD, (k.user, info)
        assert {u for _, u, _ in info["results"]} == {k.uid}, f"ranks of {k.user} ran as {info}"
        infos.append(info)
    print(f"8 clusters of {WORLD} up and answered in {took:.1f} s; each from Cluster() to result: "
          + ", ".join(f"{i['end'] - i['start']:.1f}" for i in infos) + " s")
    # they ran at the same time: every cluster started before any had its first result
    assert max(i["start"] for i in infos) < min(i["end"] for i in infos), infos

    # from /proc: each cluster's ranks listen (gloo) inside one network namespace of their own,
    # shared with no other cluster and not the kernel's; the kernel listens on no TCP port for
    # its cluster (its control socket is a Unix socket in the cluster's folder)
    owner, families, zygotes = {}, [], {}
    for k, info in zip(kernels, infos):
        ranks = {pid for _, _, pid in info["results"]}
        fam = proc_view.family(k.pid, k.uid) | ranks
        families.append(fam)
        forked_by = {proc_view._parent(p) for p in ranks}
        assert len(forked_by) == 1, f"{k.user}'s ranks have parents {forked_by}"
        z = forked_by.pop()
        assert "userzygote_main" in proc_view.describe(z) and z not in proc_view.family(k.pid, k.uid), \
            f"{k.user}'s ranks come from {proc_view.describe(z)}"
        assert z in proc_view.pids_of(k.uid), f"{k.user}'s zygote {z} runs as another user"
        assert zygotes.setdefault(k.user, z) == z, f"two zygotes for {k.user}: {zygotes[k.user]}, {z}"
        ports = proc_view.listening_ports(ranks, own_namespace=True)
        assert all(ports[p] for p in ranks), f"a rank of {k.user} listens on no port: {ports}"
        spaces = {proc_view.net_namespace(p) for p in ranks}
        assert len(spaces) == 1 and 0 not in spaces, f"ranks of {k.user} in namespaces {spaces}"
        space = spaces.pop()
        assert space != proc_view.net_namespace(k.pid), f"{k.user}'s ranks share the kernel's network"
        assert space not in owner, (f"network namespace {space} holds the ranks of kernel {k.pid} "
                                    f"({k.user}) and of kernel {owner[space]}")
        owner[space] = f"{k.pid} ({k.user})"
        kernel_ports = _cluster_ports(k, fam)[k.pid]
        assert not kernel_ports - _before_ports[k.pid], (
            f"kernel {k.pid} ({k.user}) opened TCP ports {kernel_ports} for its cluster")
    assert len(set(zygotes.values())) == 2, f"one zygote per user: {zygotes}"
    print(f"{len(owner)} distinct network namespaces over the 8 clusters; zygotes {zygotes}")

    # close every cluster at once: only the kernels are left, nothing new on disk
    closed = execute_all(kernels, CLOSE, timeout=120)
    for k, r in zip(kernels, closed):
        assert r.status == "ok" and not r.error and not r.stderr.strip(), (k.user, r)
    kernel_pids = {k.pid for k in kernels}
    for k, fam in zip(kernels, families):
        left = lambda: [p for p in fam - {k.pid} if p in proc_view.pids_of(k.uid)]   # noqa: E731
        assert _wait(lambda: not left(), 30), (
            f"after close(), {k.user}'s cluster left: " + "; ".join(map(proc_view.describe, left())))
    for u, uid in uids.items():
        others = [p for p in proc_view.pids_of(uid) if p not in kernel_pids and p != zygotes[u]]
        assert not others, f"{u} runs more than its kernels: " + "; ".join(map(proc_view.describe, others))
        new = (proc_view.owned_files(uid, homes[u]) - before[u] - _torch_cache(u) - _zygote_folder(uid)
               - _kernel_history(homes[u]))
        assert not new, f"{u}'s clusters left files behind: {sorted(new)}"

    # the kernels go; then the idle zygotes: no process and no new file of either user is left
    print(f"closed in {time.monotonic() - t0 - took:.1f} s")
    shutdown_all(kernels)
    for u, uid in uids.items():
        assert _wait(lambda: not proc_view.pids_of(uid), IDLE + 30), (
            f"{u} still runs: " + "; ".join(map(proc_view.describe, proc_view.pids_of(uid))))
        new = proc_view.owned_files(uid, homes[u]) - before[u] - _torch_cache(u) - _kernel_history(homes[u])
        assert not new, f"{u}'s zygote left files behind: {sorted(new)}"


def _zygote_folder(uid: int) -> set:
    """The learner's zygote's folder (socket, lock), there while it runs."""
    return {str(pathlib.Path(tempfile.gettempdir(), f"labkit-zygote-{uid}"))}
