"""The learner's zygote (issue 36, labkit/runtime/local/userzygote.py): one per user, shared by
the notebooks of that user and outliving them, never giving a rank stale code, never keeping a
rank alive past its notebook. Each notebook here is a process of its own; each test uses a
zygote of its own (LABKIT_ZYGOTE_IDLE is part of the zygote's key) and stops it at the end.
(Another user's attempts on it: test_runtime_isolation.py.)"""
import os
import pathlib
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

import pytest

import labkit
from labkit.runtime import stacks
from labkit.runtime.local import userdir, userzygote, zygote
from support.runtime_helpers import gone

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600),
              pytest.mark.skipif(not zygote.ENABLED, reason="no zygote without fork and pidfd "
                                 "(LABKIT_PORTABLE=1, macOS)")]
ROOT = pathlib.Path(__file__).resolve().parents[2]

# A notebook: its cluster's ranks report who forked them, where they are, what they import.
NOTEBOOK = r"""
import os, sys, time
import labkit
def look():
    import os, labkit, helpers
    with open(f"/proc/{os.getpid()}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    return ppid, os.getcwd(), helpers.VALUE, os.environ.get("LKT_MINE"), getattr(labkit, "ZPROBE", None)
c = labkit.Cluster(2, backend="gloo", spares=0)
print("ZYGOTE", c.source.pool.zygote.proc.pid, c.source.pool.zygote.shared, flush=True)
print("RANKS", repr(c.run(look)), flush=True)
print("PIDS", *[w.pid for w in c.ranks], c.source.pool.stack_dir, flush=True)
if sys.argv[1] == "hold":
    sys.stdin.read()
c.close()
"""


def key_env(**more) -> dict:
    """An environment whose zygote is this test's alone (the idle time is part of its key)."""
    return dict(os.environ, LABKIT_ZYGOTE_IDLE=f"300.{uuid.uuid4().int % 10**9}",
                PYTHONPATH=str(ROOT), **more)


def notebook(folder: pathlib.Path, env: dict, value: int, hold=False, root=ROOT):
    folder.mkdir(exist_ok=True)
    (folder / "helpers.py").write_text(f"VALUE = {value}\n")
    return subprocess.Popen([sys.executable, "-c", NOTEBOOK, "hold" if hold else "run"],
                            cwd=folder, env=dict(env, PYTHONPATH=str(root)), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def said(p) -> dict:
    """ZYGOTE, RANKS and PIDS lines of a notebook, as they come."""
    out = {}
    while len(out) < 3:
        line = p.stdout.readline()
        assert line, f"the notebook ended early ({p.poll()})"
        word, _, rest = line.strip().partition(" ")
        if word in ("ZYGOTE", "RANKS", "PIDS"):
            out[word] = rest
    z, shared = out["ZYGOTE"].split()
    *pids, stack_dir = out["PIDS"].split()
    return {"zygote": int(z), "shared": shared == "True", "ranks": eval(out["RANKS"]),
            "pids": [int(x) for x in pids], "stack_dir": stack_dir}


def finish(p) -> None:
    if p.stdin:
        p.stdin.close()
    assert p.wait(120) == 0


def stop_zygote(pid: int) -> None:
    """SIGTERM: it stops taking notebooks and exits once its own have gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    t0 = time.monotonic()
    while not gone(pid) and time.monotonic() - t0 < 15:
        time.sleep(0.05)
    assert gone(pid), "the zygote did not exit on SIGTERM"


def session(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[3])


def stopped_why(z: int) -> str:
    """What zygote `z` said in its log when it stopped taking notebooks ('' if nothing)."""
    where = userdir.folder()
    for name in os.listdir(where):
        if name.endswith(".log"):
            try:
                text = pathlib.Path(where, name).read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith(f"labkit zygote {z}: "):
                    return line
    return ""


def test_a_later_notebook_forks_from_the_learners_zygote(tmp_path):
    """Two notebooks of one user, in two folders with a helpers.py each: both clusters' ranks
    are forked by one zygote, which is no child of either notebook and outlives the first;
    each rank has its own notebook's folder, modules and environment. A zygote that stopped
    taking notebooks because a file it imported changed on disk (CI: another test's work, once
    in about ten runs) rightly sends the next notebook to a fresh one: the pair is tried once
    more then, and the reason is printed."""
    for attempt in (1, 2):
        env = key_env()
        a = notebook(tmp_path / f"a{attempt}", env, 1)
        sa = said(a)
        finish(a)
        b = notebook(tmp_path / f"b{attempt}", dict(env, LKT_MINE="b"), 2)
        sb = said(b)
        z = sa["zygote"]
        why = stopped_why(z) if sb["zygote"] != z else ""
        if attempt == 1 and "changed on disk" in why:
            print(f"\nthe first zygote stopped taking notebooks ({why}); once more")
            finish(b)
            stop_zygote(z)
            stop_zygote(sb["zygote"])
            continue
        break
    try:
        assert sa["shared"] and sb["shared"]
        assert sb["zygote"] == z, f"the second notebook started a zygote of its own; the first said: {why!r}"
        assert not gone(z), "the zygote ended with the first notebook"
        assert session(z) != session(os.getpid()), "the zygote is in a session of its own"
        assert all(r[0] == z for r in sa["ranks"] + sb["ranks"])        # forked by it
        assert [r[1:4] for r in sa["ranks"]] == [(str(tmp_path / f"a{attempt}"), 1, None)] * 2
        assert [r[1:4] for r in sb["ranks"]] == [(str(tmp_path / f"b{attempt}"), 2, "b")] * 2
        assert all(gone(p) for p in sa["pids"]) and not os.path.exists(sa["stack_dir"])
        finish(b)
        assert all(gone(p) for p in sb["pids"]) and not os.path.exists(sb["stack_dir"])
        assert not gone(z), "the idle zygote waits for the next notebook"
    finally:
        stop_zygote(z)


def test_a_changed_labkit_file_gives_the_next_cluster_a_fresh_zygote(tmp_path):
    """A copy of labkit (its own zygote: the folder is part of the key). A notebook runs; then
    labkit's __init__.py is edited (as a pip install or an edit would): the next notebook's
    ranks run the new code, from a new zygote, and the old zygote exits. A mere touch (the
    file's stamps change, its text does not) is enough to start a fresh one too."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "labkit", root / "labkit", ignore=shutil.ignore_patterns("__pycache__"))
    init = root / "labkit" / "__init__.py"
    init.write_text(init.read_text() + "\nZPROBE = 1\n")
    env = key_env()
    zygotes = []
    try:
        first = said(p := notebook(tmp_path / "nb", env, 0, root=root))
        finish(p)
        zygotes.append(first["zygote"])
        assert first["shared"] and [r[4] for r in first["ranks"]] == [1, 1]
        init.write_text(init.read_text().replace("ZPROBE = 1", "ZPROBE = 2"))
        second = said(p := notebook(tmp_path / "nb", env, 0, root=root))
        finish(p)
        zygotes.append(second["zygote"])
        assert [r[4] for r in second["ranks"]] == [2, 2], "a rank ran the old labkit"
        assert second["zygote"] != first["zygote"]
        t0 = time.monotonic()
        while not gone(first["zygote"]) and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        assert gone(first["zygote"]), "the stale zygote did not exit"
        os.utime(root / "labkit" / "runtime" / "worker.py")
        third = said(p := notebook(tmp_path / "nb", env, 0, root=root))
        finish(p)
        zygotes.append(third["zygote"])
        assert third["zygote"] != second["zygote"] and all(r[0] == third["zygote"] for r in third["ranks"])
    finally:
        for z in zygotes:
            stop_zygote(z)


def test_a_killed_notebook_takes_its_ranks_and_leaves_the_zygote(tmp_path, monkeypatch):
    """A notebook SIGKILLed while one of its ranks is stopped: its ranks and its folder go at
    once (the zygote saw its connection close), the zygote stays, and another notebook's
    cluster on the same zygote (this test's) runs on."""
    env = key_env()
    monkeypatch.setenv("LABKIT_ZYGOTE_IDLE", env["LABKIT_ZYGOTE_IDLE"])
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])     # part of the key: the notebook's own
    mine = labkit.Cluster(2, backend="gloo", spares=0)
    z = mine.source.pool.zygote.proc.pid
    try:
        p = notebook(tmp_path / "a", env, 1, hold=True)
        s = said(p)
        assert s["zygote"] == z
        os.kill(s["pids"][0], signal.SIGSTOP)
        p.kill()
        p.wait()
        t0 = time.monotonic()
        while not all(gone(q) for q in s["pids"]) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert all(gone(q) for q in s["pids"]), "a rank outlived its notebook"
        t0 = time.monotonic()
        while os.path.exists(s["stack_dir"]) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not os.path.exists(s["stack_dir"])
        assert not gone(z)
        assert mine.run(labkit.rank) == [0, 1]
        # the bench's class figure reads the same from /proc (labkit/bench/start_class.py)
        from labkit.bench.start_class import forked_by
        assert forked_by([{"ranks": mine.run(os.getpid), "uid": os.getuid()}]) == {os.getuid(): {z}}
        sleeper = subprocess.Popen(["sleep", "30"])
        try:
            with pytest.raises(RuntimeError, match="was forked by"):
                forked_by([{"ranks": [sleeper.pid], "uid": os.getuid()}])
        finally:
            sleeper.kill()
            sleeper.wait()
    finally:
        mine.close()
        stop_zygote(z)


def test_a_killed_zygote_leaves_the_ranks_and_the_next_cluster_starts_a_new_one(monkeypatch, capfd):
    monkeypatch.setenv("LABKIT_ZYGOTE_IDLE", key_env()["LABKIT_ZYGOTE_IDLE"])
    with labkit.Cluster(2, backend="gloo", spares=0) as c:
        z = c.source.pool.zygote.proc.pid
        pids = [w.pid for w in c.ranks]
        os.kill(z, signal.SIGKILL)
        assert c.run(labkit.rank) == [0, 1] and [w.pid for w in c.ranks] == pids
        with pytest.raises(labkit.RankError):
            c.run(os._exit, 3)
        assert c.run(labkit.rank) == [0, 1]                   # spawned instead
        assert "has stopped" in capfd.readouterr().err
    with labkit.Cluster(1, backend="gloo", spares=0) as c:
        z2 = c.source.pool.zygote.proc.pid
        assert z2 != z and c.source.pool.zygote.shared
    stop_zygote(z2)


def test_a_refusal_that_arrives_as_a_reset_gives_a_fresh_zygote(monkeypatch, capfd):
    """A zygote refuses a notebook (its code changed on disk) by sending Refused and closing;
    the notebook's Hello is by then in its queue, unread, and the kernel reports that close to
    the notebook as a reset (the same for the notebooks in the backlog of a zygote that stops
    listening). The notebook starts a fresh zygote, as for Refused, and says nothing alarming.
    Here a stand-in holds the zygote's socket and does what Server.accept does on a change."""
    import pickle
    import socket
    import threading
    monkeypatch.setenv("LABKIT_ZYGOTE_IDLE", key_env()["LABKIT_ZYGOTE_IDLE"])
    k = f"refusal{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(userzygote, "key", lambda env: k)
    path = os.path.join(userdir.folder(), f"zygote-{k}.sock")
    stand_in = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stand_in.bind(path)
    stand_in.listen(8)
    seen = []

    def refuse():
        while True:                                   # (a sweep of the folder connects and goes)
            conn, _ = stand_in.accept()
            conn.settimeout(5)
            try:
                hello = conn.recv(1 << 16, socket.MSG_PEEK)   # the Hello is queued, left unread
            except OSError:
                hello = b""
            if hello:
                break
            conn.close()
        os.unlink(path)                               # (Server.stop_listening: the socket goes)
        stand_in.close()
        seen.append(conn.send(pickle.dumps(userzygote.Refused("labkit changed on disk"))))
        conn.close()
    t = threading.Thread(target=refuse, daemon=True)
    t.start()
    z = None
    try:
        with labkit.Cluster(2, backend="gloo", spares=0) as c:
            t.join(5)
            assert seen, "the notebook never reached the stand-in"
            z = c.source.pool.zygote.proc.pid
            assert c.source.pool.zygote.shared and c.run(labkit.rank) == [0, 1]
        assert "could not reach" not in capfd.readouterr().err
    finally:
        if os.path.exists(path) and z is None:
            os.unlink(path)
        if z is not None:
            stop_zygote(z)


def test_a_notebook_gone_before_its_refusal_leaves_the_zygote_running(tmp_path):
    """The zygote refuses a connection when its code changed on disk (Server.accept); a
    notebook that has closed its end by then (it gave up, or was killed) must not end the
    zygote with a BrokenPipeError (a zygote's log showed one), which would reset every
    notebook waiting in its backlog. Here Server.accept itself, on a socket of its own."""
    import socket
    from labkit.runtime.local import userzygote_main as um
    where = tmp_path / "z"
    where.mkdir(mode=0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(where / "zygote-k.sock"))
    listener.listen(4)
    srv = um.Server(listener.detach(), str(where), "k", 60.0)
    srv.wake_r, srv.wake_w = os.pipe()

    class Changed:
        fd = None

        def changed(self):
            return "torch/__init__.py"

        def close(self):
            pass
    srv.watch = Changed()
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    gone.connect(str(where / "zygote-k.sock"))
    gone.send(b"hello")                   # its Hello queued, then it goes before the zygote answers
    gone.close()
    try:
        srv.accept()                      # raised BrokenPipeError before
        assert srv.listener is None and not (where / "zygote-k.sock").exists(), "it stops listening"
    finally:
        os.close(srv.wake_r)
        os.close(srv.wake_w)


def test_env_gets_a_zygote_of_its_cluster_and_zero_none(monkeypatch):
    """env= may be read while torch imports: that cluster's ranks come from a zygote of its
    own, started with it. LABKIT_ZYGOTE=cluster: one per Cluster, as before; 0: spawned."""
    with labkit.Cluster(1, backend="gloo", spares=0, env={"LKT_MINE": "x"}) as c:
        assert not c.source.pool.zygote.shared
        assert c.run(lambda: os.environ.get("LKT_MINE")) == ["x"]
    monkeypatch.setenv("LABKIT_ZYGOTE", "cluster")
    with labkit.Cluster(1, backend="gloo", spares=0) as c:
        assert not c.source.pool.zygote.shared


def test_idle_zygote_exits_after_its_idle_time(tmp_path):
    env = dict(key_env(), LABKIT_ZYGOTE_IDLE=f"2.{uuid.uuid4().int % 10**9}")
    s = said(p := notebook(tmp_path / "a", env, 1))
    finish(p)
    t0 = time.monotonic()
    while not gone(s["zygote"]) and time.monotonic() - t0 < 30:
        time.sleep(0.2)
    assert gone(s["zygote"]), "the zygote outlived its idle time"


def test_an_unsafe_folder_is_refused_and_the_cluster_still_starts(tmp_path, monkeypatch, capfd):
    """The zygote's folder must be this user's, 0700, and no link: else nothing in it is
    trusted and the cluster starts a zygote of its own (one line says why)."""
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    os.chmod(wide, 0o755)
    with pytest.raises(PermissionError, match="open to other users"):
        userdir.safe_folder(str(wide))
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(PermissionError, match="not a folder"):
        userdir.safe_folder(str(tmp_path / "link"))
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(PermissionError, match="belongs to uid 65534"):
            userdir.safe_folder(str(theirs))
    assert stat.S_IMODE(os.stat(userdir.safe_folder(str(tmp_path / "new"))).st_mode) == 0o700
    xdg, tmp = tmp_path / "xdg", tmp_path / "tmp"
    (xdg / "labkit").mkdir(parents=True, mode=0o755)
    os.chmod(xdg / "labkit", 0o755)
    tmp.mkdir()
    (tmp / f"labkit-zygote-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(userzygote, "_said", [])
    capfd.readouterr()
    with labkit.Cluster(1, backend="gloo", spares=0) as c:
        assert not c.source.pool.zygote.shared
        assert c.run(labkit.rank) == [0]
    err = capfd.readouterr().err
    assert err.count("starts its own process that forks ranks") == 1 and "not a folder" in err, err


def _say_and_hang_up(where: str, zygote_pid: int, message: bytes) -> None:
    """Connect to the zygote as this user (not as a notebook) and hang up after `message`."""
    import socket
    sock_path = next(p[:-len(".pid")] + ".sock" for p in map(str, pathlib.Path(where).glob("zygote-*.pid"))
                     if pathlib.Path(p).read_text().strip() == str(zygote_pid))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sock_path)
    s.send(message)
    time.sleep(0.2)
    s.close()


def test_a_process_of_the_user_that_is_no_notebook_never_ends_the_zygote(tmp_path):
    """The zygote serves every notebook of the user at once: what one connection sends (not a
    Hello, a Hello whose cluster folder is not there or is gone already, as when a notebook
    removes its folder while the zygote drops it) ends that connection, never the zygote.
    It once died of a FileNotFoundError there, and every other notebook's ranks were then
    described as 'exited with code 255' (CI, test_rank_killed_holding_shared_memory)."""
    import pickle
    env = key_env()
    a = notebook(tmp_path / "a", env, 1, hold=True)
    sa = said(a)
    z = sa["zygote"]
    where = userdir.folder()
    gone_dir = tempfile.mkdtemp(prefix="labkit-")
    os.rmdir(gone_dir)
    try:
        for message in [b"not a pickle", pickle.dumps(("a", "tuple")),
                        pickle.dumps(userzygote.Hello({}, "/", "x", None, b"", ())),
                        pickle.dumps(userzygote.Hello({}, "/", "x", gone_dir, b"", ()))]:
            _say_and_hang_up(where, z, message)
            time.sleep(0.3)
            assert not gone(z), f"the zygote died of {message[:60]!r}"
        b = notebook(tmp_path / "b", env, 2)
        sb = said(b)
        assert sb["zygote"] == z and all(r[0] == z for r in sb["ranks"])
        finish(b)
        finish(a)
        assert all(gone(p) for p in sa["pids"] + sb["pids"])
    finally:
        stop_zygote(z)
