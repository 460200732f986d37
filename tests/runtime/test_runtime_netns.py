"""A local cluster's ranks in a network namespace of their own (labkit/runtime/local/netns.py):
one namespace for every rank of a cluster (forked by the zygote or spawned), loopback up inside,
none of their sockets in the notebook's /proc/net/tcp, the control channel a Unix socket; and
where no namespace can be made, one line at `Cluster()` saying what that leaves open."""
import os
import subprocess
import sys

import pytest

import labkit
from labkit.runtime.local import netns

pytestmark = pytest.mark.cluster
linux_only = pytest.mark.skipif(netns.wanted() != "", reason=f"no private network: {netns.wanted()}")


def _where():
    import os
    import socket
    import torch
    import torch.distributed as dist
    x = torch.ones(4)
    dist.all_reduce(x)
    with open("/proc/net/tcp") as f:                      # this rank's namespace's table
        listening = sum(1 for line in f.readlines()[1:] if line.split()[3] == "0A")
    with open("/proc/net/dev") as f:                      # this namespace's interfaces
        links = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
    import fcntl
    import struct
    from labkit.runtime.local import netns
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = fcntl.ioctl(s.fileno(), netns.SIOCGIFFLAGS, struct.pack("16sh22x", b"lo", 0))
    lo_up = bool(struct.unpack_from("h", req, 16)[0] & netns.IFF_UP)
    return (os.readlink("/proc/self/ns/net"), links, lo_up, listening, x.tolist(),
            socket.gethostbyname("localhost"))


def _my_listening_inodes(pids) -> set:
    out = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(target[8:-1])
    return out


@linux_only
def test_every_rank_shares_one_private_network(cluster2):
    c = cluster2
    assert c.source.pool.netns is not None, c.source.pool.netns_why
    rows = c.run(_where)
    mine = os.readlink("/proc/self/ns/net")
    spaces = {r[0] for r in rows}
    assert len(spaces) == 1 and mine not in spaces, (mine, rows)
    for ns, links, lo_up, listening, total, _ in rows:
        assert links == ["lo"] and lo_up, (links, lo_up)          # lo up, nothing else
        assert listening >= 1 and total == [2.0] * 4
    inodes = _my_listening_inodes([w.pid for w in c.ranks])
    with open("/proc/net/tcp") as f:                          # the notebook's view (everyone's)
        seen = {line.split()[9] for line in f.readlines()[1:]}
    assert not inodes & seen, "a rank's socket shows in the notebook's /proc/net/tcp"
    assert isinstance(c.source.pool.server.address, str)     # the control channel: Unix socket
    c.restart()                                               # new ranks: the same namespace
    assert {r[0] for r in c.run(_where)} == spaces


@linux_only
def test_traffic_is_measured_inside_the_ranks_network(cluster2):
    def fn():
        import torch
        from labkit.comm import traffic
        x = torch.ones(1 << 16)
        with traffic.measure(sync=True) as m:
            import torch.distributed as dist
            dist.all_reduce(x)
        return m.sent, m.received
    for sent, received in cluster2.run(fn):
        # a 2-rank all-reduce of 256 KiB sends and receives at least the 128 KiB half each way
        assert sent >= (1 << 17) and received >= (1 << 17), (sent, received)


SPAWNED = """
import os, labkit
with labkit.Cluster(2, spares=0, timeout=60) as c:
    print(c.source.pool.zygote is None, c.source.pool.netns is not None)
    print(len({r for r in c.run(lambda: os.readlink('/proc/self/ns/net'))}),
          os.readlink('/proc/self/ns/net') in c.run(lambda: os.readlink('/proc/self/ns/net')))
"""


@linux_only
def test_spawned_ranks_share_the_namespace_too():
    """LABKIT_ZYGOTE=0 (and every rank spawned after the zygote died): fresh interpreters join
    the cluster's namespace through the fds the pool holds."""
    out = subprocess.run([sys.executable, "-c", SPAWNED], capture_output=True, text=True,
                         timeout=240, env=dict(os.environ, LABKIT_ZYGOTE="0"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "True", "1", "False"], out.stdout + out.stderr[-2000:]
    assert "gloo ports" not in out.stderr


@linux_only
def test_no_namespace_is_said_in_one_line(monkeypatch, capsys):
    """The kernel refuses the namespace (forced here: as with unprivileged user namespaces off
    by sysctl or AppArmor): Cluster() says in one line that other users can reach the gloo
    ports, in the learner's language, and works as before."""
    monkeypatch.setattr(netns, "_make", lambda timeout: (_ for _ in ()).throw(
        PermissionError(1, "unshare: Operation not permitted")))
    for lang, words in (("en", "other users of this machine can connect to the ranks' gloo ports"),
                        ("zh", "这台机器上的其他用户可以连接各 rank 的 gloo 端口")):
        monkeypatch.setenv("LABKIT_LANG", lang)
        with labkit.Cluster(2, spares=0, timeout=60) as c:
            assert c.source.pool.netns is None
            assert c.run(lambda: labkit.rank()) == [0, 1]
        err = [line for line in capsys.readouterr().err.splitlines() if "gloo" in line]
        assert len(err) == 1 and words in err[0] and "Operation not permitted" in err[0], err
        assert "docs/teaching.md" in err[0]


def test_portable_mode_says_it_too():
    code = "import labkit\nwith labkit.Cluster(1, spares=0) as c: print(c.run(lambda: 7))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                         env=dict(os.environ, LABKIT_PORTABLE="1"))
    assert out.returncode == 0 and out.stdout.strip() == "[7]", out.stderr[-2000:]
    said = [line for line in out.stderr.splitlines() if "gloo ports" in line]
    assert len(said) == 1 and "LABKIT_PORTABLE=1 is set" in said[0], out.stderr


AS_LEARNER = """
import os, torch, labkit
with labkit.Cluster(2, spares=0, timeout=120) as c:
    p = c.source.pool.netns
    print(p and p.kinds, c.source.pool.netns_why or "-")
    def fn(x):
        import os, torch.distributed as dist
        y = x.clone(); dist.all_reduce(y)
        return y.sum().item(), os.readlink("/proc/self/ns/net"), os.getuid(), torch.ones(1 << 17)
    rows = c.run(fn, torch.ones(1 << 17))              # a tensor out, and one back
    print([r[0] for r in rows], len({r[1] for r in rows}), os.readlink("/proc/self/ns/net") in
          {r[1] for r in rows}, {r[2] for r in rows} == {os.getuid()}, float(rows[1][3].sum()))
"""


@linux_only
def test_a_learner_who_is_not_root_gets_a_user_and_network_namespace():
    """The route of a class: the learner is an ordinary user, so the ranks get a user namespace
    (their own uid mapped to itself) with the network namespace inside. Their tensors from the
    notebook go through the socket (the kernel does not let them open /proc/<notebook>/fd);
    results come back; the sum is exact."""
    from support import sysusers
    sysusers.skip_unless_root()
    python = sysusers.python_for_others("lktother")
    out = subprocess.run([python, "-c", AS_LEARNER], capture_output=True, text=True, timeout=300,
                         **sysusers.as_user("lktother"))
    lines = out.stdout.splitlines()
    if lines and lines[0].startswith("None"):                 # this kernel refuses it: say why
        pytest.skip(f"unprivileged user namespaces refused here: {lines[0]}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert lines == ["['user', 'net'] -", f"[{2.0 * (1 << 17)}, {2.0 * (1 << 17)}] 1 False True "
                                          f"{float(1 << 17)}"], out.stdout + out.stderr[-2000:]
