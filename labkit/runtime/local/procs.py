"""Starting worker processes on this machine: the launcher thread, their environment, the
thread policy (a fair share of the cores per rank) and the rendezvous file (a FileStore).

Every worker starts as a *spare* (torch imported, connected, no rank yet). A Cluster promotes
`world_size` spares to ranks; after a hang or a crash it kills its ranks and promotes the
next spares, which is why recovery costs a process-group init, not an `import torch`.
A started worker is a `handle.LocalRank` to the rest of the runtime.
"""
import os
import queue
import subprocess
import sys
import threading

from labkit.runtime import portable
from labkit.runtime.local import watchdog
from labkit.runtime.local.handle import LocalRank

_LABKIT_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))   # the folder above labkit/


class _Launcher:
    """Starts every worker from one long-lived thread. A worker asks the kernel to SIGKILL it
    when its parent dies (PR_SET_PDEATHSIG), and Linux sends that signal when the *thread*
    that started it ends, so workers must not be started from a short-lived thread."""

    def __init__(self):
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._queue.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:          # noqa: B902 - handed to the caller
                box.append((False, exc))
            done.set()

    def __call__(self, fn):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="labkit-launcher")
                self._thread.start()
        box, done = [], threading.Event()
        self._queue.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


_launcher = _Launcher()


def worker_env(threads: int, extra_env: dict = None) -> dict:
    """The environment of a worker (spawned, or forked from the zygote), with `extra_env` set
    before anything imports."""
    env = dict(os.environ)
    path = [_LABKIT_ROOT, *env.get("PYTHONPATH", "").split(os.pathsep)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in path if p))   # each once
    env["PYTHONUNBUFFERED"] = "1"                 # prints reach the notebook as they happen
    env["OMP_NUM_THREADS"] = str(threads)         # a fair share of the cores per rank
    env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    env.pop("MPLBACKEND", None)                   # the kernel's inline backend is not for ranks
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)                        # a torchrun parent must not leak into ranks
    env.update(extra_env or {})
    env["LABKIT_DRIVER_PID"] = str(os.getpid())   # the worker dies with this process
    return env


def launch(server, stack_dir: str, threads: int, extra_env: dict = None,
           private=None) -> LocalRank:
    """Start one spare worker: a fresh interpreter running labkit.runtime.worker, leading its
    own process group (killed as a group), inside the cluster's network namespace `private`
    (netns.Private) when there is one."""
    env = worker_env(threads, extra_env)
    env.update(private.env() if private is not None else {})
    proc = _launcher(lambda: subprocess.Popen(
        [sys.executable, "-m", "labkit.runtime.worker", server.address, stack_dir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=env, cwd=os.getcwd(), close_fds=True,
        pass_fds=tuple(private.fds) if private is not None else (), start_new_session=True))
    watchdog.watch(proc.pid)                      # no PR_SET_PDEATHSIG here: killed from outside
    proc.stdin.write(server.authkey.hex().encode() + b"\n")   # the key never shows in `ps`
    proc.stdin.close()                            # nothing more: input() on the rank sees EOF
    return LocalRank(proc)


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    return len(os.sched_getaffinity(0)) if portable.AFFINITY else os.cpu_count() or 1


def fair_threads(world_size: int) -> int:
    """Cores available to this process divided among the ranks, at least one each."""
    return max(1, usable_cores() // world_size)


RANKS_PER_CORE = 32        # more than this per core: the ranks would do nothing but switch
PROCESS_BYTES = 100 << 20  # memory of one worker process (a forked rank dirties ~10 MB at rest,
                           # a spawned one holds ~240 MB; a rank that trains holds more)


def available_memory():
    """Bytes of memory this machine can still give (MemAvailable; else all of it), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_capacity(world_size: int, spares: int) -> None:
    """A ValueError, before any process starts, for more ranks than this machine can run."""
    from labkit.i18n.messages import tr
    cores = usable_cores()
    memory = available_memory()
    processes = world_size + spares
    need = processes * PROCESS_BYTES
    if world_size <= cores * RANKS_PER_CORE and (memory is None or need <= memory):
        return
    gb = "?" if memory is None else f"{memory / 2**30:.1f}"
    raise ValueError(tr(
        "world_size={world_size} is more ranks than this machine can run: it has {cores} cores "
        "and {gb} GB of memory available; labkit runs at most {per_core} ranks per core ({most} "
        "here) and needs about {mb} MB per process ({processes} processes with the spares: "
        "{need_gb:.1f} GB). Ask for fewer ranks (the course needs at most 8), fewer spares "
        "(spares=0), or ranks on other machines (Cluster.remote).",
        world_size=world_size, cores=cores, gb=gb, per_core=RANKS_PER_CORE,
        most=cores * RANKS_PER_CORE, mb=PROCESS_BYTES >> 20, processes=processes,
        need_gb=need / 2**30))


def rendezvous_store(folder: str, gen: int) -> str:
    """The file the ranks rendezvous through (torch's FileStore), made here: `folder` is the
    cluster's private folder (0700, ours), and the file is created 0600 and must not exist yet;
    `gen`: the process group it serves (each has a file of its own: LocalRanks._store).

    Not a TCP store: any local user can connect to a loopback port, and torch's TCPStore has no
    key, so another user could list, read and rewrite it (and point the next process group at
    a port of theirs). A file in a folder only this user can enter is reachable by no one else.
    Returns the file's path."""
    st = os.stat(folder)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"the cluster's folder {folder} must belong to this user with "
                              f"mode 0700 (it is {oct(st.st_mode & 0o777)}, uid {st.st_uid}); "
                              "its rendezvous file would not be private")
    path = os.path.join(folder, f"rendezvous-{gen}")   # one per process group (LocalRanks._store)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    return path


__all__ = ["launch", "worker_env", "fair_threads", "rendezvous_store", "check_capacity"]
