"""Ranks on other machines: two torchrun "nodes" on this machine (rendezvous on 127.0.0.1,
one agent each) driven by Cluster.remote over TLS; the runtime's failure cases against them."""
import json
import multiprocessing
import os
import pathlib
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

import labkit
from labkit.runtime import portable
from labkit.runtime.remote import agent
from labkit.runtime.remote import tls
from labkit.runtime.stacks import proc_state

ROOT = pathlib.Path(__file__).resolve().parents[2]
TORCHRUN = str(pathlib.Path(sys.executable).with_name("torchrun"))
pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(not portable.NODE_AGENT, reason="the node side of Cluster.remote "
                                 "needs Linux (pidfd, /proc, SO_PEERCRED): off with LABKIT_PORTABLE=1")]


def _torchrun(command: str, node: int, log) -> subprocess.Popen:
    cmd = shlex.split(command)
    i = cmd.index("torchrun")
    cmd = cmd[:i] + [TORCHRUN, "--node-rank", str(node), "--local-addr", "127.0.0.1"] + cmd[i + 1:]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    folder = tmp_path_factory.mktemp("remote")
    c = labkit.Cluster.remote("127.0.0.1:0", nnodes=2, nproc_per_node=1,
                              join_file=str(folder / "join.json"), env={"GLOO_SOCKET_IFNAME": "lo"},
                              timeout=30, start_timeout=90, restart_timeout=60, heartbeat_timeout=3)
    logs = [open(folder / f"node{n}.log", "w") for n in range(2)]
    nodes = [_torchrun(c.source.commands["torchrun"], n, logs[n]) for n in range(2)]
    c.torchruns, c.logs = nodes, [folder / f"node{n}.log" for n in range(2)]
    try:
        # The ranks up before the first test: a test that times a fault starts its clock on a
        # cluster that is ready (in the serial phase the first of them used to time torchrun's
        # start and the ranks' import of torch as well: 6.0-8.1 s against its 6 s).
        assert c.run(labkit.rank) == [0, 1]
        yield c
    finally:
        c.close()
        for p in nodes:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def total():
    import torch
    import torch.distributed as dist
    t = torch.ones(1) * (labkit.rank() + 1)
    dist.all_reduce(t)
    return t.item()


def test_commands_and_the_key_file(remote):
    cmd = remote.source.commands["torchrun"]
    for part in ("torchrun --nnodes 2 --nproc-per-node 1", "--rdzv-backend c10d",
                 f"--rdzv-endpoint {remote.source.rdzv_endpoint}", "-m labkit.runtime.remote.rank",
                 f"--join {remote.source.join_file}", "--max-restarts"):
        assert part in cmd
    assert remote.source.commands["srun"].startswith(f"srun --job-name {remote.source.name} --nodes 2 --ntasks-per-node 1 "
                                              "env GLOO_SOCKET_IFNAME=lo torchrun")
    key = json.load(open(remote.source.join_file))["key"]
    assert key not in cmd and key not in remote.source.commands["srun"], "the key never on a command line"
    assert os.stat(remote.source.join_file).st_mode & 0o777 == 0o600


def test_a_normal_run_and_ranks_cell(remote, capsys):
    assert remote.run(total) == [3.0, 3.0]
    assert remote.backend == "gloo" and sorted(n["name"] for n in remote.source.nodes) == [
        "node 0 (host %s)" % socket.gethostname(), "node 1 (host %s)" % socket.gethostname()]
    remote.push(x=5)
    assert remote.exec_cell("y = x * 10 + rank\nprint('rank', rank, 'of', world_size)\ny",
                            "<cell>") == [50, 51]
    assert remote.pull("y") == [50, 51]
    assert "[rank 1] rank 1 of 2" in capsys.readouterr().out
    import torch
    big = torch.arange(100_000.0)                 # tensors are pickled, not shared memory
    assert remote.run(lambda t: float(t.sum()) + labkit.rank(), big) == [float(big.sum()), float(big.sum()) + 1]


def test_an_error_names_the_rank_and_its_node(remote):
    remote.push(kept="still here")

    def fn():
        if labkit.rank() == 1:
            raise ValueError("bad shape on this rank")
        return 0

    with pytest.raises(labkit.RankError) as info:
        remote.run(fn)
    text = str(info.value)
    assert f"--- rank 1 on node 1 (host {socket.gethostname()}): ValueError: bad shape" in text
    assert 'raise ValueError("bad shape on this rank")' in text
    assert not info.value.restarted and remote.pull("kept") == ["still here"] * 2, "state kept"


@pytest.mark.serial      # asserts a time (seconds after the fault): alone in CI
def test_a_hang_in_a_collective_gives_remote_stacks(remote):
    def exchange():
        import torch
        import torch.distributed as dist
        if labkit.rank() == 0:
            dist.recv(torch.zeros(4), src=1)      # rank 1 never sends
        return labkit.rank()

    t0 = time.monotonic()
    with pytest.raises(labkit.RankTimeout) as info:
        remote.run(exchange, timeout=2)
    assert time.monotonic() - t0 < 6
    err = info.value
    assert sorted(err.stuck) == [0] and err.stuck[0].startswith("in recv()")
    assert "dist.recv(torch.zeros(4), src=1)" in err.stuck[0]
    assert "on node 0 (host" in str(err) and err.restarted
    assert remote.run(total) == [3.0, 3.0], "torchrun restarted the ranks; the next run works"


def test_a_killed_rank(remote):
    """Rank 1 stops its node's agent for a second before it kills itself, so torchrun has
    reaped it before the agent asks how it ended (what a busy machine does by chance). A
    kernel older than 6.15 keeps no exit status after the reap: there it is not stopped."""
    def die(agent_pid):
        if labkit.rank() == 1:
            if agent_pid:
                os.kill(agent_pid, signal.SIGSTOP)
            os.kill(os.getpid(), signal.SIGKILL)
        import torch
        import torch.distributed as dist
        dist.all_reduce(torch.ones(1))

    remote.wait_for_ranks()
    node1 = next(n for n in remote.source.nodes if n["name"].startswith("node 1"))
    stall = node1["agent_pid"] if _kernel() >= (6, 15) else 0
    wake = threading.Timer(1.0, os.kill, (stall or os.getpid(), signal.SIGCONT))
    wake.start()
    try:
        with pytest.raises(labkit.RankError) as info:
            remote.run(die, stall)
    finally:
        wake.join()
    first = str(info.value).splitlines()[1]
    assert first.startswith("--- rank 1 on node 1") and "killed (SIGKILL" in first, str(info.value)
    assert remote.run(total) == [3.0, 3.0]


def _kernel() -> tuple:
    import re
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())


def test_how_a_rank_ended_is_read_before_and_after_torchrun_reaps_it():
    """The agent reads a rank's exit status when its pidfd turns readable; torchrun (its
    parent) reaps it within 0.1 s, and on a busy machine the agent may come later than that.
    Before the reap /proc has the status; after it, the pidfd (Linux >= 6.15)."""
    from labkit.runtime.remote.agent_ranks import exit_status
    for argv, status in ((["sleep", "30"], signal.SIGKILL), (["sh", "-c", "exit 3"], 3 << 8)):
        p = subprocess.Popen(argv)
        fd = os.pidfd_open(p.pid)
        if status == signal.SIGKILL:
            p.send_signal(signal.SIGKILL)
        import select
        select.select([fd], [], [], 10)           # exited, not yet reaped: a zombie
        assert exit_status(p.pid, fd) == status, "before the reap"
        p.wait()                                  # the parent reaps it, as torchrun does
        if _kernel() < (6, 15):
            pytest.skip(f"this kernel ({os.uname().release}) keeps no exit status with a pidfd "
                        "(Linux >= 6.15 does): a rank reaped first is reported as 'unknown'")
        assert exit_status(p.pid, fd) == status, "after the reap"
        os.close(fd)


def test_an_interrupt_stops_every_remote_rank(remote):
    pids = remote.run(os.getpid)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt, match="ranks were stopped"):
        remote.run(time.sleep, 30)
    for pid in pids:                              # same machine here: we can look
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{pid}") and proc_state(pid) not in ("Z", "") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc_state(pid) in ("Z", ""), f"rank process {pid} still running"
    assert remote.run(total) == [3.0, 3.0]


@pytest.mark.serial      # asserts a time (seconds after the fault): alone in CI
def test_a_killed_node_agent_is_named(remote):
    remote.wait_for_ranks()                       # (first on its worker: the agents may not be here yet)
    node1 = next(n for n in remote.source.nodes if n["name"].startswith("node 1"))
    threading.Timer(1.0, os.kill, (node1["agent_pid"], signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(labkit.RankError) as info:
        remote.run(time.sleep, 20)
    assert time.monotonic() - t0 < 5
    text = str(info.value)
    assert "rank 1 on node 1 (host" in text and "was lost: its labkit agent closed" in text, text
    assert remote.run(total) == [3.0, 3.0], "torchrun restarted node 1's ranks and a new agent"


def test_a_client_without_the_key_or_certificate_is_refused(remote):
    host, port = remote.source.address
    with socket.create_connection((host, port), 5) as s:   # no TLS at all: shut out
        s.sendall(b"hello, I am a worker\n" * 4)
        s.settimeout(5)
        got = b""
        try:
            while True:
                data = s.recv(100)
                if not data:
                    break
                got += data
        except ConnectionResetError:
            pass
        assert got == b"" or got[:1] == b"\x15", f"only a TLS alert, then the door closes: {got!r}"
    join = json.load(open(remote.source.join_file))
    wrong = dict(join, key=os.urandom(32).hex())  # the right certificate, a wrong key
    with pytest.raises(multiprocessing.AuthenticationError):
        agent.connect(f"{host}:{port}", wrong)
    other = tls.private_dir("labkit-test-")       # a certificate of another cluster
    try:
        cert, _, _ = tls.make_certificate(other, join["name"])
        with pytest.raises(ssl.SSLError):
            agent.connect(f"{host}:{port}", dict(join, cert=open(cert).read()))
    finally:
        shutil.rmtree(other, ignore_errors=True)  # its private key does not stay in /tmp
    assert remote.run(total) == [3.0, 3.0], "the cluster is unharmed"


def test_a_key_file_readable_by_others_is_refused(remote, tmp_path):
    bad = tmp_path / "join.json"
    bad.write_text(open(remote.source.join_file).read())
    os.chmod(bad, 0o644)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "labkit.runtime.remote.rank", "--connect",
                        "127.0.0.1:1", "--join", str(bad)], capture_output=True, text=True,
                       env=env, timeout=30)
    assert p.returncode == 2
    assert "other users may read it (mode 0644)" in p.stderr and f"chmod 600 {bad}" in p.stderr


def test_two_ranks_on_one_node_share_one_agent_and_close_cleanly(tmp_path):
    """Both ranks of a torchrun race to start the node's agent: one wins, both register; closing
    the cluster makes the ranks exit 0, so torchrun ends with 0."""
    c = labkit.Cluster.remote("127.0.0.1:0", nnodes=1, nproc_per_node=2, timeout=30,
                              join_file=str(tmp_path / "join.json"), start_timeout=90,
                              env={"GLOO_SOCKET_IFNAME": "lo"})
    with open(tmp_path / "node.log", "w") as log:
        p = _torchrun(c.source.commands["torchrun"], 0, log)
    try:
        assert c.run(total) == [3.0, 3.0]
        assert [n["ranks"] for n in c.source.nodes] == [[0, 1]]
        assert c.run(lambda: labkit.local_rank()) == [0, 1]
    finally:
        c.close()
        try:
            code = p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            code = p.wait()
    assert code == 0, open(tmp_path / "node.log").read()[-2000:]
    assert not os.path.exists(c.source.join_file), "the key file is removed when the cluster closes"


@pytest.mark.serial      # asserts a time (seconds after the fault): alone in CI
def test_a_silent_node_is_named_within_the_heartbeat_timeout(remote):
    node1 = next(n for n in remote.source.nodes if n["name"].startswith("node 1"))
    threading.Timer(1.0, os.kill, (node1["agent_pid"], signal.SIGSTOP)).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(labkit.RankError) as info:
            remote.run(time.sleep, 20)
        assert time.monotonic() - t0 < 1.0 + remote.source.heartbeat_timeout + 3
        text = str(info.value)
        assert "rank 1 on node 1 (host" in text and "no word from its labkit agent for 3 s" in text
    finally:
        os.kill(node1["agent_pid"], signal.SIGCONT)   # it finds the notebook gone and leaves
    assert remote.run(total) == [3.0, 3.0], "torchrun restarted node 1's rank, a new agent connected"


def test_a_node_whose_torchrun_ended_is_named_and_the_next_run_says_what_to_do(remote):
    """Last: node 1 leaves for good."""
    node1 = next(n for n in remote.source.nodes if n["name"].startswith("node 1"))
    os.kill(node1["torchrun_pid"], signal.SIGKILL)  # its ranks die with it (PDEATHSIG)
    remote.restart_timeout = 3
    with pytest.raises(labkit.RankError, match="rank 1 on node 1"):
        remote.run(time.sleep, 20)
    with pytest.raises(TimeoutError) as info:
        remote.run(total)
    text = str(info.value)
    assert "have not reached the notebook" in text and "node 1 (host" in text and "its torchrun has exited" in text
    assert "run there again" in text and "torchrun --nnodes 2" in text


def _agent_dirs() -> dict:
    """This user's node-agent folders, by the agent's pid."""
    import glob
    import tempfile
    out = {}
    for d in glob.glob(os.path.join(tempfile.gettempdir(), "labkit-agent-*-*")):
        pid = os.path.basename(d).split("-")[2]
        if pid.isdigit() and os.stat(d).st_uid == os.getuid():
            out.setdefault(int(pid), []).append(d)
    return out


def test_close_ends_every_torchrun_and_leaves_no_agent_folder(remote):
    """After node 1's torchrun died, node 0's torchrun waits in a rendezvous that cannot
    complete; close() still ends it (its agent gives it SIGTERM after a grace period). The
    agent SIGKILLed earlier in this module left its folder; the agent started after it removed
    it. Runs after the test above (node 1 gone)."""
    node0 = remote.torchruns[0]
    assert node0.poll() is None
    remote.close()
    try:
        node0.wait(agent.TORCHRUN_GRACE_S + 15)
    except subprocess.TimeoutExpired:
        pytest.fail("node 0's torchrun still runs after close()")
    left = {pid: d for pid, d in _agent_dirs().items() if not os.path.exists(f"/proc/{pid}")}
    assert left == {}, f"folders of agents that are gone: {left}"


def test_no_tls_is_refused_off_loopback():
    with pytest.raises(ValueError, match="without TLS"):
        labkit.Cluster.remote("0.0.0.0:0", nnodes=1, nproc_per_node=1, tls=False)


@pytest.mark.parametrize("tool", ["openssl", "cryptography"])
def test_the_certificate_is_pinned(tool, tmp_path, monkeypatch):
    """Both ways of making the cluster's certificate give a TLS server that a client holding
    that certificate accepts, and that a client holding another cluster's refuses."""
    if tool == "cryptography":
        pytest.importorskip("cryptography")
        monkeypatch.setattr(tls.shutil, "which", lambda name: None)
    elif not tls.shutil.which("openssl"):
        pytest.skip("no openssl tool")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cert, key, how = tls.make_certificate(str(tmp_path / "a"), "labkit-test")
    other, _, _ = tls.make_certificate(str(tmp_path / "b"), "labkit-test")
    assert how == tool and os.stat(key).st_mode & 0o777 == 0o600
    server = tls.server_context(cert, key)

    def handshake(pem):
        a, b = socket.socketpair()
        t = threading.Thread(target=lambda: _quietly(lambda: server.wrap_socket(a, server_side=True).close()))
        t.start()
        try:
            c = tls.client_context(pem).wrap_socket(b, server_hostname="labkit-test")
            tls.check_pinned(c, pem)
            c.close()
        finally:
            t.join(5)
            a.close()

    handshake(open(cert).read())
    with pytest.raises(ssl.SSLError):
        handshake(open(other).read())


def _quietly(fn):
    try:
        fn()
    except (OSError, ssl.SSLError):
        pass
