"""The learner's zygote (issue 36): one per user and interpreter, shared by every notebook of
that user and outliving them, so that a notebook opened after another one forks its ranks from
a process that imported torch long ago (the notebook's side; the process: userzygote_main.py).

    notebook A (first Cluster)                   the learner's zygote
      flock; connect -> nothing there:
      bind + listen on <folder>/zygote-<key>.sock, start it (its own session) --> imports torch
      connect; Hello (env, cwd, folder, key) + the cluster's namespace fds -->  accepts, checks
                                                                           the peer's uid
      "fork" + a pipe fd  -->  Forked(pid) / Exited(pid, status)  (as zygote.py)
    notebook B (any later Cluster of the same user): flock; connect; Hello ... (warm: ~10 ms)

- `<folder>`: $XDG_RUNTIME_DIR/labkit, else <tmp>/labkit-zygote-<uid>; made 0700 and refused
  (with one line, then a zygote of the cluster's own as before) when it is a link, another
  user's, or open to others. The zygote checks every connection's uid (SO_PEERCRED) and the
  notebook checks the zygote's.
- `<key>`: the interpreter, labkit's and torch's folders and the environment variables read
  while torch imports (`import_vars`); a notebook whose differ gets a zygote of its own key.
  A Cluster given `env=` gets a zygote of its own cluster (zygote.Zygote), started with that
  environment: a variable may be read while torch imports. `pg_timeout`, threads per rank, the
  learner's folder, sys.path and modules travel with each rank's init and task, as before.
- It exits after LABKIT_ZYGOTE_IDLE seconds (default 900) without a notebook, and as soon as a
  file of a module it imported changes on disk (stamps.py: it refuses new notebooks at once,
  which start a fresh one, and exits once its own have gone).
- LABKIT_ZYGOTE=cluster: a zygote per Cluster (zygote.Zygote, as before issue 36);
  LABKIT_ZYGOTE=0 or LABKIT_PORTABLE=1: none, ranks are spawned.
"""
import fcntl
import os
import pickle
import socket
import subprocess
import sys
from typing import NamedTuple

from labkit.i18n.messages import tr
from labkit.runtime.local.userdir import Peer, folder, key, peer_uid, safe_folder

IDLE_DEFAULT = 900.0


class Hello(NamedTuple):            # notebook -> zygote, once, with the namespace fds
    env: dict                       # the ranks' environment (procs.worker_env)
    cwd: str
    address: str                    # the cluster's control socket
    stack_dir: str
    authkey: bytes
    netns: tuple                    # kinds of the namespace fds sent with it ("user", "net")
    cpus: tuple = ()                # the notebook's CPU affinity, which its ranks get


class Refused(NamedTuple):          # zygote -> notebook: start a fresh zygote (why)
    why: str


def wanted() -> bool:
    from labkit.runtime.local import zygote
    return zygote.ENABLED and os.environ.get("LABKIT_ZYGOTE", "1") != "cluster"


def idle_seconds() -> float:
    try:
        return float(os.environ.get("LABKIT_ZYGOTE_IDLE", IDLE_DEFAULT))
    except ValueError:
        return IDLE_DEFAULT


def _sweep(where: str) -> None:
    """Remove the sockets of zygotes that died without cleaning up (killed, or the machine
    rebooted without clearing the folder), under the lock: nothing answers there."""
    for name in os.listdir(where):
        if name.startswith(("zygote-", "kernels-")) and name.endswith(".sock"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(os.path.join(where, name))
            except ConnectionRefusedError:
                stem = os.path.join(where, name[:-len(".sock")])
                for path in (stem + ".sock", stem + ".pid", stem + ".log"):
                    try:
                        if not path.endswith(".log") or os.path.getsize(path) == 0:
                            os.unlink(path)       # (a log that says something stays)
                    except OSError:
                        pass
            except OSError:
                pass
            finally:
                s.close()


MAIN = "labkit.runtime.local.userzygote_main"


def ranks_env(env: dict) -> dict:
    """The environment the learner's zygote starts with: one thread (its forks are ranks, which
    set their own), no notebook's pid."""
    zenv = dict(env, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    zenv.pop("LABKIT_DRIVER_PID", None)           # no notebook's: each rank gets its own
    return zenv


def _start(where: str, path: str, k: str, zenv: dict, module: str = MAIN, python=None):
    """Bind and listen here (under the lock), then start the zygote (`module`: the learner's,
    or kernels_main's) with the listening socket: a notebook that connects meanwhile waits in
    its backlog, never finds a half-made socket."""
    _sweep(where)
    stem = path[:-len(".sock")]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(128)
        logfd = os.open(stem + ".log",
                        os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        with os.fdopen(logfd, "ab") as log:       # it forks at once and its parent exits: it
            proc = subprocess.Popen(              # is no child of ours, nor in our group
                [*(python or [sys.executable]), "-m", module,
                 str(listener.fileno()), where, k, str(idle_seconds())],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=zenv,
                cwd=where, close_fds=True, pass_fds=(listener.fileno(),),
                start_new_session=True)
        try:
            pid = int(proc.stdout.readline() or b"0")     # the zygote's pid, from its parent
        finally:
            proc.stdout.close()
            proc.wait()
    finally:
        listener.close()
    if not pid:
        raise OSError("the zygote did not start (see its log in the same folder)")
    with open(stem + ".pid", "w") as f:           # for a notebook that finds it silent
        f.write(str(pid))
    return Peer(pid)


def take_lock(where: str) -> int:
    """The folder's lock, held (an fd; closing it releases). A zygote takes it to unlink its
    socket, the last one also to remove the lock file and the folder: a lock taken on a file
    that is gone by then is taken again on a fresh one."""
    while True:
        safe_folder(where)                        # (made again if the last zygote removed it)
        lock = os.open(os.path.join(where, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.fstat(lock).st_nlink > 0:
            return lock
        os.close(lock)


def _connect_or_start(where: str, k: str, zenv: dict, stem: str = "zygote", module: str = MAIN,
                      python=None):
    """(connected socket, Peer of the zygote if we started it, else None). `zenv`: the
    environment it starts with if none runs; `stem`, `module`, `python` (the interpreter's
    argv): kernels.py's server."""
    path = os.path.join(where, f"{stem}-{k}.sock")
    lock = take_lock(where)
    try:
        proc = None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            proc = _start(where, path, k, zenv, module, python)
            sock.connect(path)
    finally:
        os.close(lock)                            # (closing releases the lock)
    return sock, proc


def _is_zygote(pid: int, pid_file: str) -> bool:
    """Is `pid` still the zygote of that pid file (not a process that reused its pid)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    stem, _, k = os.path.basename(pid_file)[:-len(".pid")].partition("-")
    module = {"zygote": MAIN, "kernels": "labkit.runtime.local.kernels_main"}.get(stem)
    return module is not None and module.encode() in argv and k.encode() in argv


def _first_answer(sock, pid_file: str, timeout: float = None):
    """The zygote's answer to our Hello (or the kernels' server's to a launcher). A zygote that
    the kernel stopped (SIGSTOP, a debugger) never answers: it is killed and the caller starts
    a fresh one (Refused). None: no answer within `timeout` seconds."""
    import time
    from labkit.runtime import stacks
    sock.settimeout(0.5)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                data = sock.recv(1 << 16)
                return pickle.loads(data) if data else Refused("it closed the connection")
            except socket.timeout:
                if deadline is not None and time.monotonic() > deadline:
                    return None
            try:
                with open(pid_file) as f:
                    pid = int(f.read())
            except (OSError, ValueError):
                continue
            if stacks.proc_state(pid) in ("T", "t") and _is_zygote(pid, pid_file):
                stopped = Peer(pid)
                stopped.kill()
                stopped.close()
                return Refused(f"it was stopped (pid {pid})")
    finally:
        sock.settimeout(None)


def connect(server, stack_dir: str, threads: int, on_forked, on_lost, private=None):
    """A zygote.Zygote talking to this user's zygote (started if none runs), or None (said in
    one line, once) where it cannot be shared here."""
    from labkit.runtime.local import procs, zygote
    env = procs.worker_env(threads, {})
    env.pop("LABKIT_NETNS_FDS", None)
    try:
        where = folder()
        k = key(env)
    except OSError as exc:
        _say_once(tr("labkit: each notebook starts its own process that forks ranks ({why}).",
                     why=exc))
        return None
    hello = Hello(env, os.getcwd(), server.address, stack_dir, server.authkey,
                  tuple(private.kinds) if private is not None else (),
                  tuple(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ())
    fds = list(private.fds) if private is not None else []
    why = None
    for _ in range(3):                            # a zygote that refuses (its code changed) goes
        sock, proc = _connect_or_start(where, k, ranks_env(env))
        try:
            if peer_uid(sock)[1] != os.getuid():  # (the folder is ours: only a bug could do this)
                raise PermissionError("the zygote's socket belongs to another user")
            socket.send_fds(sock, [pickle.dumps(hello)], fds)
            ready = None
            if proc is None:                      # another notebook's: warm, or importing torch
                msg = _first_answer(sock, os.path.join(where, f"zygote-{k}.pid"))
                if isinstance(msg, Refused):
                    sock.close()
                    continue
                ready = msg.pid
            log = os.path.join(where, f"zygote-{k}.log")
            z = zygote.Zygote.attach(sock, proc or Peer(ready), log, on_forked, on_lost, ready)
            z.path = os.path.join(where, f"zygote-{k}.sock")
            return z
        except (ConnectionResetError, BrokenPipeError) as exc:
            # A zygote that refuses us (its code changed on disk: `Server.accept`) closes the
            # connection with our Hello unread, and a zygote that stops listening (the same, or
            # it ended) resets the connections still in its backlog: the kernel reports either
            # as a reset, before the Refused it sent. Both mean: start a fresh one, as Refused does.
            sock.close()
            why = exc
            continue
        except OSError as exc:
            sock.close()
            why = exc
            break
    if why is not None:
        _say_once(tr("labkit: could not reach your process that forks ranks ({why}); this "
                     "notebook starts its own.", why=why))
    return None


def prestart() -> None:
    """Start this user's zygote if none runs, without waiting for it: what a notebook kernel's
    `import labkit` does in a thread of its own (labkit/__init__.py), so that the zygote's import
    of torch overlaps the kernel's own and the learner's reading, and the first Cluster finds it
    ready. A zygote that no notebook has used goes after userzygote_main.UNUSED seconds."""
    try:
        if not wanted():
            return
        from labkit.runtime.local import procs
        env = procs.worker_env(1, {})
        env.pop("LABKIT_NETNS_FDS", None)
        where = folder()
        sock, _ = _connect_or_start(where, key(env), ranks_env(env))
        sock.close()
    except Exception:                             # noqa: BLE001 - the first Cluster says why
        pass


_said = []


def _say_once(line: str) -> None:
    if not _said:
        _said.append(line)
        print(line, file=sys.stderr)
