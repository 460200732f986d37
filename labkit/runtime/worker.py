"""The rank side of a Cluster, for ranks on this machine and under torchrun alike.

What a rank's module uses (local: `start` below, run by a spawned interpreter or a zygote's
fork; remote: remote/rank.py under torchrun): `die_with_parent()`, `prepare(stack_path)` and
`serve(conn, owner_alive, on_lost)`.

Life of a worker:
1. start as a *spare*: import torch, connect to the notebook's control socket, say hello;
2. on ``init``: join the process group as rank r of n (gloo or NCCL), say ready;
3. loop: run each task on the main thread, send back its result or its failure.

The main thread reads the control socket between tasks; a second thread only watches it.
When the notebook's kernel dies the socket hangs up, that thread sees it (even during a task)
and the worker kills its process group (itself and anything it
started) at once, so no rank outlives its kernel; a worker that cannot run that thread
(stopped, or holding the GIL in C code) is killed by the kernel: PR_SET_PDEATHSIG (without it:
the notebook's watchdog process, local/watchdog.py).
A process forked from a rank never answers for it: it exits where it would return to the loop.
Output goes to fd 1/2, a pipe that the notebook reads and prefixes with ``[rank N]``.
Where a rank is stuck (even inside C++), the notebook sends SIGUSR1 and faulthandler writes
every thread's Python stack to this worker's stack file.
"""
import ctypes
import datetime
import faulthandler
import os
import select
import signal
import sys
import threading

from labkit.runtime import protocol

# Workers never re-import the learner's __main__: this module is __main__ here.
_libc = ctypes.CDLL(None)
_PID = os.getpid()          # a forked child sees another pid: it must never answer for the rank
_opts = None                # how this rank joined its process group (to join again)
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent goes, even if it is stopped or holds
    the GIL in C code (when no Python code of ours can run). Without prctl (macOS,
    LABKIT_PORTABLE=1) the notebook's watchdog process does it (local/watchdog.py)."""
    from labkit.runtime import portable
    if portable.PRCTL:
        try:
            _libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (AttributeError, OSError):
            pass


def _exit_all() -> None:
    """Leave, taking every process this worker started with it (it leads its own group)."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    os._exit(0)


def _owner_alive_check(owner: int):
    """Is the notebook (pid `owner`) still there? A forked worker's parent is the zygote, so it
    watches the notebook through a pidfd (the zygote needs Linux >= 5.3: zygote.ENABLED)."""
    if owner == os.getppid():
        return lambda: os.getppid() == owner
    import select
    poller = select.poll()
    poller.register(os.pidfd_open(owner), select.POLLIN)   # readable once the notebook exits
    return lambda: not poller.poll(0)


def _watch(conn, owner_alive, on_lost) -> None:
    """The second thread: when the notebook goes away (its end of the connection hangs up, or
    `owner_alive()` turns false) call `on_lost(eof)`, which ends the process, even while the
    main thread runs a task. It never reads: the main thread alone reads the connection,
    between tasks (`_next`), so a message wakes one thread of the rank, not two."""
    hangup = getattr(select, "POLLRDHUP", 0) | select.POLLHUP   # POLLRDHUP: Linux's word for it
    poller = select.poll()
    poller.register(conn.fileno(), hangup)
    while True:
        if poller.poll(1000):                  # hung up, or the socket failed: never data
            on_lost(True)
        if not owner_alive():                  # our kernel (or torchrun) is gone
            on_lost(False)


def _next(conn, on_lost):
    """The notebook's next message for the main thread (a task, or init/rejoin); a Release
    (the notebook has loaded our last result) lets go of its shared memory on the way."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            on_lost(True)
        if isinstance(msg, protocol.Release):
            conn.release_results()
            continue
        return msg


def _flush() -> None:
    """Push everything printed so far into the pipe, Python and C buffers alike."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    _libc.fflush(None)


def _store(opts: dict, timeout):
    """The rendezvous store: a local cluster's file in its private folder (`store_path`), or
    torchrun's TCP store (`store_host`, `store_port`) for ranks on other machines."""
    import torch.distributed as dist
    if "store_path" in opts:
        store = dist.FileStore(opts["store_path"], -1)   # -1: the notebook removes the file
        store.set_timeout(timeout)
        return store
    return dist.TCPStore(opts["store_host"], opts["store_port"], None, False, timeout=timeout)


def _join(opts: dict, prefix: str) -> None:
    """Join (or join again) the process group, under a fresh store prefix."""
    import torch
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    rank, world_size, backend = opts["rank"], opts["world_size"], opts["backend"]
    device = torch.device("cuda", opts.get("local_rank", rank)) if backend == "nccl" else torch.device("cpu")
    timeout = datetime.timedelta(seconds=opts["pg_timeout"])
    store = dist.PrefixStore(prefix, _store(opts, timeout))
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timeout, **kwargs)
    warm = torch.zeros(1, device=device)
    dist.all_reduce(warm)                         # connect every pair now, not in the learner's first cell


def _init(conn, opts: dict) -> None:
    import torch
    from labkit.runtime import context
    global _opts

    for p in reversed(opts["sys_path"]):          # the learner's modules import as in the notebook
        if p not in sys.path:
            sys.path.insert(0, p)
    torch.set_num_threads(opts["threads"])
    if opts.get("lang"):                          # labkit.set_lang in the notebook, remote ranks too
        os.environ["LABKIT_LANG"] = opts["lang"]
    rank, world_size, backend = opts["rank"], opts["world_size"], opts["backend"]
    if backend == "nccl":
        device = torch.device("cuda", opts.get("local_rank", rank))   # remote: torchrun's LOCAL_RANK
        torch.cuda.set_device(device)             # the notes' first pitfall, done for the learner
    else:
        device = torch.device("cpu")
    _opts = opts
    _join(opts, opts["prefix"])
    context._set_worker(rank, world_size, device, backend, conn)


def _serve(conn, on_lost) -> None:
    from labkit.runtime import learner, tasks
    ns = None
    while True:
        msg = _next(conn, on_lost)
        if isinstance(msg, (protocol.Init, protocol.Rejoin)):
            try:
                if isinstance(msg, protocol.Init):
                    _init(conn, msg.opts)
                    ns = tasks.namespace()
                else:
                    _opts.update(msg.store or {})     # a rendezvous file of its own (local)
                    _join(_opts, msg.prefix)
                _flush()
                conn.send(protocol.Ready(_opts["rank"]))
            except BaseException as exc:      # noqa: B902 - reported to the notebook
                _flush()
                conn.send(protocol.InitFailed(tasks.failure_report(exc)))
            continue
        task_id, kind, payload = msg.task_id, msg.kind, msg.payload
        conn.release_results()                # the notebook has long loaded the last result
        conn.new_task(task_id, msg.event_limits)
        error = None
        try:
            learner.apply(msg.learner)        # the notebook's folder, path, modules
            value = tasks.to_cpu(tasks.run(kind, payload, ns))
            learner.note_imports()
            try:
                data = conn.dumps_result(value)   # tensors through shared memory
                out = protocol.Result(task_id, True, data)
                del value, data                   # hold no argument or result between tasks
            except Exception as exc:
                raise TypeError(f"the function's return value ({type(value).__name__}) cannot be "
                                f"sent back to the notebook: {exc}. Return plain numbers, lists, "
                                "dicts or tensors instead.") from None
        except BaseException as exc:          # noqa: B902 - a KeyboardInterrupt/SystemExit too
            error = exc
            out = protocol.Result(task_id, False, tasks.failure_report(exc))
        finally:
            dropped = conn.events_dropped()
            conn.new_task(None)
        _flush()                              # output first: it is in the pipe before the result
        if os.getpid() != _PID:               # a child forked by the task came back here
            os._exit(0)
        if tasks.pg_suspect(error):
            conn.send(protocol.PgLost(task_id))   # the notebook has the ranks join a new group
        if dropped:
            conn.send(protocol.EventsDropped(task_id, dropped))
        conn.send(out)


def _after_fork_in_child() -> None:
    die_with_parent()                           # a child of a rank dies with the rank


def prepare(stack_path: str) -> None:
    """Make this process a rank's: it answers for the rank (a child it forks never does, and
    dies with it), writes every thread's stack to `stack_path` on a crash or on SIGUSR1, and
    ignores Ctrl-C (the notebook decides what an interrupt does)."""
    global _PID
    _PID = os.getpid()                             # the zygote imported this module
    os.register_at_fork(after_in_child=_after_fork_in_child)
    stack_file = open(stack_path, "w")
    faulthandler.enable(file=stack_file, all_threads=True)          # crashes: SIGSEGV, SIGABRT ...
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)   # "where are you?"
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def serve(conn, owner_alive, on_lost) -> None:
    """Serve the notebook's tasks on this (main) thread, forever, over `conn` (a
    channel.Channel); a second thread watches for the notebook's end (see _watch).
    `on_lost(eof)` must end the process."""
    threading.Thread(target=_watch, args=(conn, owner_alive, on_lost), daemon=True,
                     name="labkit-control").start()
    _serve(conn, on_lost)


def start(address: str, stack_dir: str, authkey: bytes, owner: int) -> None:
    """Become a spare: connect to the notebook's control socket (a Unix socket in the cluster's
    folder), say hello, serve tasks.
    Run by `main` in a spawned interpreter and by the zygote in each forked child (whose
    parent is the zygote: it watches the notebook, `owner`, by pid instead)."""
    stack_path = os.path.join(stack_dir, f"stack-{os.getpid()}.txt")
    prepare(stack_path)

    import torch                                   # the slow part (~1.7 s): done while a spare
    import torch.distributed                       # noqa: F401
    import cloudpickle                             # noqa: F401
    from labkit.runtime import frames, protocol
    from labkit.runtime.channel import Channel

    conn = Channel(frames.connect(address, authkey))
    conn.send(protocol.Hello(os.getpid(), threading.main_thread().ident, stack_path))
    serve(conn, _owner_alive_check(owner), lambda eof: _exit_all())


def main() -> None:
    die_with_parent()
    if os.environ.get("LABKIT_DRIVER_PID") not in (None, str(os.getppid())):
        os._exit(0)                                # the notebook died before we could ask
    from labkit.runtime.local import netns
    netns.enter()                                  # the cluster's own network, while single-threaded
    address, stack_dir = sys.argv[1], sys.argv[2]
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    start(address, stack_dir, authkey, os.getppid())


if __name__ == "__main__":
    main()
