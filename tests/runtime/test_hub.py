"""A class on one JupyterHub: two learners log in, start their servers, and run notebook 00's
first cells at the same time, each in their own kernel, as their own system user.

The hub is JupyterHub from PyPI with configurable-http-proxy from npm, the local-process spawner
and PAM logins (JupyterHub's defaults for a class on one machine: each learner a system user
with their own password, set here with chpasswd, so the test logs in as a learner would; one
learner's password does not open the other's account). Each server starts as in
docs/teaching.md: the learner's copy of the course built into ~/course, the kernel `labkit`.

Then each learner's kernel tries the other's cluster: its control socket with a guessed key, its
stack folder, a SIGKILL to a rank, a rank's /proc environment and memory, the kernel's
connection file (its message key); every attempt must be refused, and the victim's next run
works. What this does not try is issue 25 part 1's (the rendezvous store, the agent's socket).

Runs as root (CI); elsewhere, or without the hub installed, it is skipped with one line.
"""
import json
import os
import pathlib
import re
import secrets
import shutil
import tempfile
import threading
import time

import pytest

from support import hub_setup
from support import sysusers
from support.hub_accounts import one_hub  # noqa: F401 (the fixture)
from support.hub_accounts import end_all, install_kernel
from support.hub_setup import Hub, Learner, code_cells_until, dedent, processes_of
from labkit.runtime.ports import ephemeral_range

pytestmark = [pytest.mark.hub, pytest.mark.cluster, pytest.mark.timeout(420)]

USERS = ("lkthub1", "lkthub2")
ROOT = pathlib.Path(__file__).resolve().parents[2]

WHERE = dedent("""
    import json, ipykernel
    print("WHERE " + json.dumps({
        "control": cluster.source.pool.server.address,
        "stack_dir": cluster.source.pool.stack_dir,
        "pids": [w.pid for w in cluster.ranks],
        "connection_file": ipykernel.get_connection_file()}))
""")

# Run in the attacker's kernel, with WHERE's answer from the victim's kernel as `victim`.
ATTACKS = dedent("""
    import json, os, signal, socket
    from multiprocessing.connection import AuthenticationError, Connection, answer_challenge

    def control_port():                      # the handshake every rank makes, with a guessed key
        addr = victim["control"]             # a Unix socket in the cluster's folder (local), else host:port
        if isinstance(addr, str):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(addr)
        else:
            s = socket.create_connection(tuple(addr), timeout=10)
        s.setblocking(True)                  # the server ends a handshake after 10 s itself
        c = Connection(s.detach())
        try:
            answer_challenge(c, os.urandom(32))
        finally:
            c.close()

    def read(path, n=64):
        with open(path, "rb") as f:
            return f.read(n)

    attempts = {
        "control socket, guessed key": control_port,
        "list the stack folder": lambda: os.listdir(victim["stack_dir"]),
        "SIGKILL rank 0": lambda: os.kill(victim["pids"][0], signal.SIGKILL),
        "read rank 0's /proc environ": lambda: read(f"/proc/{victim['pids'][0]}/environ"),
        "open rank 0's /proc mem": lambda: read(f"/proc/{victim['pids'][0]}/mem", 0),
        "read the kernel's connection file": lambda: read(victim["connection_file"]),
    }
    results = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            results[name] = "SUCCEEDED"
        except (PermissionError, ConnectionError, EOFError, AuthenticationError) as e:
            results[name] = f"refused ({type(e).__name__}: {e})"
        except OSError as e:                 # neither refused nor done: the test says which
            results[name] = f"error ({type(e).__name__}: {e})"
    print("ATTEMPTS " + json.dumps(results))
""")


def tagged(text: str, tag: str) -> dict:
    line = next((l for l in text.splitlines() if l.startswith(tag + " ")), None)
    assert line is not None, f"no {tag} line in:\n{text}"
    return json.loads(line[len(tag) + 1:])


def assert_hello(name: str, text: str, error, greeting: str) -> None:
    assert error is None, f"{name}'s kernel raised {error}:\n{text}"
    for r in range(4):
        assert f"[rank {r}] {greeting} from rank {r} of 4" in text, f"{name}: rank {r} missing:\n{text}"
    assert "[0, 1, 4, 9]" in text, f"{name}: results missing:\n{text}"


def test_two_learners_on_one_hub(one_hub):
    sysusers.skip_unless_root()
    why = hub_setup.missing()
    if why:
        pytest.skip(why)
    python = sysusers.python_for_others()
    uids = {sysusers.ensure_user(u)[0]: u for u in USERS}
    stale = end_all(set(uids), timeout=0)
    assert not stale, f"processes of an earlier run were left (now killed): {stale}"
    passwords = {u: secrets.token_urlsafe(16) for u in USERS}
    for u in USERS:
        hub_setup.set_password(u, passwords[u])
    folder = pathlib.Path(tempfile.mkdtemp(prefix="labkit-hub-"))
    cores = sorted(os.sched_getaffinity(0))
    cpus = {u: str(cores[i % len(cores)]) for i, u in enumerate(USERS)}     # a core each
    hub = Hub(folder, cpus, python, install_kernel(python))
    try:
        hub.wait_up()
        learners = {u: Learner(hub, u) for u in USERS}
        a, b = (learners[u] for u in USERS)
        assert not Learner(hub, a.name).login(passwords[b.name]), "the other's password let a learner in"
        for u, learner in learners.items():
            assert learner.login(passwords[u]), f"{u} could not log in:\n{hub.tail()}"
            learner.make_token()
            learner.start_server()
        ready = {u: learner.wait_server() for u, learner in learners.items()}
        routes = re.findall(r"Adding user (\S+) to proxy \S+ => http://127\.0\.0\.1:(\d+)", hub.tail(200_000))
        low, _ = ephemeral_range()
        assert sorted(u for u, _ in routes) == sorted(USERS) and all(int(p) < low for _, p in routes), \
            f"each learner's server on a port below the ephemeral range (from {low}; hub_setup's pre_spawn_hook): {routes}"

        r = b.api("GET", f"/user/{a.name}/api/kernels")        # a's server, with b's token
        assert r.status_code == 403, f"{b.name} reached {a.name}'s server: {r.status_code}"
        cells = {}
        for u, learner in learners.items():
            r = learner.server("GET", "contents/course/00_cluster.ipynb?content=1")
            assert r.status_code == 200, f"{u} has no course/00_cluster.ipynb: {r.status_code}"
            cells[u] = code_cells_until(r.json()["content"], "cluster.run(")
            home = pathlib.Path(os.path.expanduser(f"~{u}"))
            assert (home / "course" / "00_cluster.ipynb").stat().st_uid == sysusers.ensure_user(u)[0]
        kernels = {u: learner.start_kernel() for u, learner in learners.items()}

        outcome, times = {}, {}

        def first_cells(u):
            t0 = time.monotonic()
            outcome[u] = [kernels[u].execute(c, timeout=180) for c in cells[u]]
            times[u] = (t0, time.monotonic())

        threads = [threading.Thread(target=first_cells, args=(u,)) for u in USERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        for u in USERS:
            assert u in outcome, f"{u}'s cells did not finish:\n{hub.tail()}"
            text, error = outcome[u][-1]
            assert_hello(u, text, error, "hello")
            assert all(e is None for _, e in outcome[u]), f"{u}: {outcome[u]}"
        assert max(t0 for t0, _ in times.values()) < min(t1 for _, t1 in times.values()), \
            f"the two learners' cells did not overlap in time: {times}"
        print(f"servers ready in {ready}; first cells "
              f"{ {u: round(t1 - t0, 1) for u, (t0, t1) in times.items()} } s, run together")

        where = {u: tagged(kernels[u].execute(WHERE)[0], "WHERE") for u in USERS}
        for u in USERS:
            for pid in where[u]["pids"]:
                assert os.stat(f"/proc/{pid}").st_uid == sysusers.ensure_user(u)[0], f"{u}'s rank {pid}"
                assert os.sched_getaffinity(pid) == {int(cpus[u])}, f"{u}'s rank {pid} not on core {cpus[u]}"
        memory = {u: round(hub_setup.pss_mib(p for p, uid, _ in processes_of(set(uids)) if uids[uid] == u))
                  for u in USERS}
        print(f"each learner's processes (server, kernel, 4 ranks and their zygote), PSS in MiB: {memory}")
        for attacker, victim in ((b.name, a.name), (a.name, b.name)):
            text, error = kernels[attacker].execute(f"victim = {where[victim]!r}\n" + ATTACKS)
            assert error is None, f"{attacker}'s attempts raised {error}:\n{text}"
            results = tagged(text, "ATTEMPTS")
            print(f"{attacker} against {victim}'s cluster: {results}")
            assert all(v.startswith("refused") for v in results.values()), \
                f"{attacker} reached {victim}'s cluster: {results}"
            text, error = kernels[victim].execute('cluster.run(hello, "still here")')
            assert_hello(victim, text, error, "still here")

        for u, learner in learners.items():
            kernels[u].shutdown()
            r = learner.api("DELETE", f"/hub/api/users/{u}/server")
            assert r.status_code in (202, 204), f"{u}'s server did not stop: {r.status_code} {r.text[:200]}"
        left = end_all(set(uids))
        assert not left, f"left behind after the servers stopped: {left}"
    finally:
        proxy = hub.stop()
        end_all(set(uids), timeout=0)
        for u in USERS:
            hub_setup.lock_password(u)
        shutil.rmtree(folder, ignore_errors=True)
    assert hub.proc.returncode is not None
    assert not proxy, f"the proxy outlived the hub: {proxy}"
