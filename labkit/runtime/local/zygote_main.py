"""The zygote process itself (the notebook's side is zygote.py): imports torch and what every
rank needs once, then forks a spare worker each time the notebook asks, reaps the children and
reports how each ended; it kills them all and exits when the notebook is gone.

    python -m labkit.runtime.local.zygote_main CONTROL_SOCKET STACK_DIR FD   (started by zygote.Zygote)
"""
import os
import pickle
import signal
import socket
import sys


def _stdio(out_fd: int) -> None:
    """A fresh fork's output to `out_fd` (the rank's output pipe), its input from /dev/null."""
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(out_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def reaped():
    """(pid, status) of each child that has ended, without waiting (both zygotes' reap loops)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def _child(out_fd: int, sock, wake_r: int, wake_w: int, argv: tuple, owner: int) -> None:
    """In a fresh fork: shed the zygote's state and become a spare worker. Never returns."""
    try:
        os.setsid()                               # its own process group, like a spawned worker's
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sock.close()
        os.close(wake_r)
        os.close(wake_w)
        _stdio(out_fd)
        _fresh_seeds()
        from labkit.runtime import worker
        address, stack_dir, authkey = argv
        worker.start(address, stack_dir, authkey, owner)
    except BaseException:                         # noqa: B902 - never return into the zygote loop
        import traceback
        traceback.print_exc()
    finally:
        os._exit(1)


def child_for(out_fd: int, h, ns_fds: list, owner: int, close: list) -> None:
    """In a fresh fork of the learner's zygote (userzygote_main.py): become a spare worker of
    the cluster that said Hello `h` (its environment, folder, cores and network namespace, whose
    fds are `ns_fds`), watching its notebook `owner`; `close`: the zygote's other fds. Never
    returns."""
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        _stdio(out_fd)
        os.environ.clear()
        os.environ.update(h.env)
        from labkit.runtime.local import netns
        if ns_fds:                            # the cluster's own network, single-threaded
            os.environ[netns.VAR] = ",".join(f"{k}={fd}" for k, fd in zip(h.netns, ns_fds))
            netns.enter()
        try:
            os.chdir(h.cwd)
            if h.cpus:                            # the notebook's cores (a hub may pin each learner)
                os.sched_setaffinity(0, h.cpus)
        except OSError:
            pass
        _fresh_seeds()
        from labkit.runtime import worker
        worker.start(h.address, h.stack_dir, h.authkey, owner)
    except BaseException:                         # noqa: B902 - never return into the loop
        import traceback
        traceback.print_exc()
    finally:
        os._exit(1)


def _fresh_seeds() -> None:
    """A fork shares the zygote's random state: torch's seed (a fresh process draws its own, so
    every rank of every cluster had the same `torch.rand` until this) and numpy's (numpy 2
    reseeds at fork by itself; an older one may not)."""
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()


def _kill_children(children: set) -> None:
    for pid in children:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


# -- every descendant of a rank ends with the cluster (issue 39, section 3) -------------------
# A rank's child in a session of its own (setsid, Popen(start_new_session=True)) escapes the
# killpg of its rank's group, and the at-fork hook (PDEATHSIG) does not run for fork+exec. The
# zygote is a child subreaper: such a process, once its rank is gone, becomes the zygote's
# child, and the zygote kills every child it did not fork (it forks only ranks); on close it
# kills them all until none is left. Without prctl (LABKIT_PORTABLE=1, macOS) there is no zygote.
PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _direct_children() -> set:
    """The pids whose parent is this process (/proc/<pid>/task/<tid>/children)."""
    found = set()
    me = os.getpid()
    try:
        tids = os.listdir(f"/proc/{me}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{me}/task/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return found


def _kill_adopted(children: set) -> None:
    """SIGKILL every child that is not one of our ranks: a rank's descendant, adopted by this
    subreaper when the rank (or the process between them) ended."""
    for pid in _direct_children() - children:
        for kill in (os.killpg, os.kill):
            try:
                if kill is os.kill or os.getpgid(pid) == pid:
                    kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _end_all(children: set, limit: float = 2.0) -> None:
    """Kill every rank and every descendant adopted so far or while they die, and reap them
    all; stop when none is left (or after `limit` seconds)."""
    import time
    deadline = time.monotonic() + limit
    _kill_children(children)
    while time.monotonic() < deadline:
        _kill_adopted(set())
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return                            # nobody left
            if pid == 0:
                break
        time.sleep(0.005)


# Imported once here so that no rank pays for them: the first torch optimizer of a process imports
# torch._dynamo (about 1.8 s of CPU each), and with it DTensor and FSDP. Importing starts no
# thread and touches no device, so the forks stay clean. LABKIT_PRELOAD=0 skips it (to compare).
PRELOAD = ("torch._dynamo", "torch.distributed.tensor", "torch.distributed.fsdp", "torch.optim")


def _preload() -> None:
    if os.environ.get("LABKIT_PRELOAD", "1") == "0":
        return
    import importlib
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:                         # an older torch without one of them: fine
            pass


def freeze() -> None:
    """Move every object this process holds now into the collector's permanent generation
    (gc.freeze), before forking: a fork's collections then never walk torch's few hundred
    thousand import-time objects (a full collection over them takes about 0.3 s of CPU here),
    and never write to their pages, which stay shared with this process instead of being copied
    into each fork. What was garbage in a cycle then stays alive for good: the few cycles
    left over from the imports, and in a warm kernel the labkit modules it drops (kernels_main)."""
    import gc
    gc.freeze()


def _enter_private_network() -> None:
    """First thing, while this process has one thread: join the cluster's network namespace
    (local/netns.py), so that every fork is a rank inside it. A zygote that cannot join exits:
    the pool then spawns workers, which try again (and fail the start with the reason)."""
    from labkit.runtime.local import netns
    netns.enter()


def main() -> None:
    import selectors
    _enter_private_network()
    address, stack_dir, fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    owner = os.getppid()
    if os.environ.get("LABKIT_DRIVER_PID") not in (None, str(owner)):
        os._exit(0)                               # the notebook died before we could start
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the notebook decides what an interrupt does
    try:                                          # the kernel dying (even by SIGKILL) wakes us
        import ctypes
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    _become_subreaper()                           # a rank's descendants end with the cluster
    import torch                                  # noqa: F401 - what every fork inherits
    import torch.distributed                      # noqa: F401
    _preload()
    import labkit.runtime.learner                 # noqa: F401
    import labkit.runtime.wire                    # noqa: F401
    import labkit.runtime.worker                  # noqa: F401
    freeze()
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: None)   # checked below: is the notebook still there?
    children = set()
    from labkit.runtime import protocol
    sock.send(pickle.dumps(protocol.ZygoteReady(os.getpid())))
    sel = selectors.DefaultSelector()            # not select.select: it fails on fds >= 1024
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        readable = [key.fileobj for key, _ in sel.select(1.0)]
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        ended = False
        for pid, status in reaped():              # reap, and tell the notebook how each ended
            if pid not in children:               # an adopted descendant (see _kill_adopted)
                continue
            children.discard(pid)
            ended = True
            try:
                sock.send(pickle.dumps(protocol.Exited(pid, status)))
            except OSError:
                pass
        if ended or wake_r in readable:
            _kill_adopted(children)
        if os.getppid() != owner:                 # the notebook is gone: leave nothing behind
            _end_all(children)
            import shutil
            shutil.rmtree(stack_dir, ignore_errors=True)
            os._exit(0)
        if sock in readable:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 64, 4)
            except OSError:
                msg, fds = b"", []
            if not msg:                           # the notebook closed the cluster (or died)
                _end_all(children)
                os._exit(0)
            pid = os.fork()
            if pid == 0:
                _child(fds[0], sock, wake_r, wake_w, (address, stack_dir, authkey), owner)
            for f in fds:
                os.close(f)
            children.add(pid)
            sock.send(pickle.dumps(protocol.Forked(pid)))


if __name__ == "__main__":
    main()
