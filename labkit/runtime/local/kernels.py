"""Warm notebook kernels (issue 36): a notebook's kernel is forked from a process of the
learner's that has imported torch and ipykernel already, instead of a fresh Python that imports
them again (about 2 s of CPU for each notebook opened, and for each restart).

    JupyterLab / nbval                the launcher (this module)          the kernels' server
    spawns the kernelspec's argv  ->  python -m labkit.runtime.local.kernels -f CONN
                                      connects to <folder>/kernels-<key>.sock (starts the server
                                      if none runs: kernels_main.py, detached, imports torch)
                                      KernelRequest + its fds 0, 1, 2  ----------------->  fork: the
                                                                     child becomes ipykernel with
                                                                     the launcher's argv,
                                      <--------------------  Forked(pid)   environment, folder,
                                      signals (interrupt, terminate) ->    sys.path, umask, cores
                                      the kernel's pid (pidfd)
                                      <--------------------  Exited(pid, status)
                                      ends as the kernel ended (its exit code or its signal)

- The launcher stands for the kernel: Jupyter interrupts, terminates and waits for it. Killed
  (SIGKILL, a restart), its connection closes and the server kills the kernel's process group.
- `<folder>` and the checks are the learner's zygote's (userdir.py: 0700, the peer's uid on
  every connection); `<key>`: the zygote's key, the thread variables, the cores and the cgroup,
  so that a kernel forked from the server is what a fresh one would have been.
- The server exits after LABKIT_ZYGOTE_IDLE seconds without a kernel, and stops taking kernels
  as soon as a file of a module it imported changes on disk (a `pip install`: stamps.py); the
  next launcher then starts a fresh one.
- LABKIT_WARM_KERNEL=0, LABKIT_ZYGOTE=0 or LABKIT_PORTABLE=1, or a server that cannot be
  reached: the launcher becomes ipykernel itself (exec), as `python -m ipykernel_launcher`.

`python -m labkit.runtime.local.kernels install NAME [PREFIX]` points the kernelspec NAME of
this environment, or of PREFIX as `ipykernel install --prefix PREFIX` wrote it (scripts/setup:
`labkit`), at the launcher.
"""
import os
import pickle
import select
import signal
import socket
import sys
from typing import NamedTuple

START_TIMEOUT = 120.0       # seconds for the answer of a server that is importing torch
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
MAIN = "labkit.runtime.local.kernels_main"
STARTUP = ("PYTHON", "LANG", "LC_")   # read as the interpreter starts (its flags, warnings, locale)


class KernelRequest(NamedTuple):     # launcher -> server, once, with the launcher's fds 0, 1, 2
    argv: list                       # ipykernel's sys.argv
    env: dict
    cwd: str
    path: list                       # the launcher's sys.path
    umask: int
    cpus: tuple


def wanted() -> bool:
    from labkit.runtime.local import zygote
    return zygote.ENABLED and os.environ.get("LABKIT_WARM_KERNEL", "1") != "0"


def key(env: dict) -> str:
    """The learner's zygote's key (interpreter, labkit, torch, what torch reads as it imports),
    what decides the threads of a fresh kernel (its variables, cores and cgroup), and what the
    interpreter takes in as it starts (its options, the PYTHON* variables, the locale)."""
    import hashlib
    from labkit.runtime.local import userdir
    try:
        with open("/proc/self/cgroup") as f:
            cgroup = f.read()
    except OSError:
        cgroup = ""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    startup = sorted((k, v) for k, v in env.items() if k.startswith(STARTUP))
    parts = [userdir.key(env), sorted((k, env.get(k)) for k in userdir.PER_RANK), cpus, cgroup,
             python(), startup]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def python() -> list:
    """This interpreter with the options it was started with (the kernelspec's
    -Xfrozen_modules=off, or -s, -O...): what comes before `-m` in its command line."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" not in argv[1:]:
        return [sys.executable, *(f"-X{k}" if v is True else f"-X{k}={v}" for k, v in sys._xoptions.items())]
    return [sys.executable, *argv[1:argv.index("-m", 1)]]


def server_env(env: dict) -> dict:
    """The server's environment: the launcher's, but one OpenMP thread. torch's import starts
    OpenMP's pool of threads, which a fork does not take along: the first parallel op of a
    kernel forked from a process with a pool waits for them for ever. Each kernel then sets
    the threads a fresh one has (kernels_main.fresh_threads)."""
    return dict(env, OMP_NUM_THREADS="1")


def _exec_cold(args: list) -> None:
    """Become ipykernel as `python -m ipykernel_launcher ARGS` would (never returns)."""
    os.execv(sys.executable, [*python(), "-m", "ipykernel_launcher", *args])


def _stdio() -> list:
    """The launcher's fds 0, 1, 2 for the kernel (/dev/null put in place of a closed one)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    return [0, 1, 2]


def _follow(sock, pid: int) -> None:
    """Stand for kernel `pid` until it ends, then end as it did (never returns)."""
    from labkit.runtime import protocol
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    for sig in FORWARDED:
        signal.signal(sig, lambda *_: None)
    watch = [sock, wake_r]
    while True:
        try:
            ready, _, _ = select.select(watch, [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                sigs = os.read(wake_r, 64)
            except BlockingIOError:
                sigs = b""
            for sig in sigs:
                try:
                    if pidfd is not None:
                        signal.pidfd_send_signal(pidfd, sig)
                    else:
                        os.kill(pid, sig)
                except OSError:
                    pass
        if sock in ready:
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            msg = pickle.loads(data) if data else None
            if isinstance(msg, protocol.Exited):
                _end_as(msg.status)
            if msg is None:                       # the server has gone: wait for the kernel
                watch = [w for w in watch if w is not sock] + ([pidfd] if pidfd is not None else [])
                if pidfd is None:
                    os._exit(1)
        if pidfd is not None and pidfd in ready:
            os._exit(1)                           # (its status went to the server that is gone)


def _end_as(status: int) -> None:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:                                  # the same signal (SIGKILL has no handler)
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def launch(args: list) -> None:
    """Have this kernel forked by the learner's kernels' server (started if none runs), and
    stand for it; else exec ipykernel here. Never returns."""
    if not wanted():
        _exec_cold(args)
    from labkit.runtime.local import userdir, userzygote
    env = dict(os.environ)
    try:
        where = userdir.folder()
        k = key(env)
    except OSError:
        _exec_cold(args)
    umask = os.umask(0o022)
    os.umask(umask)
    import importlib.util
    spec = importlib.util.find_spec("ipykernel_launcher")
    if spec is None or not spec.origin:
        _exec_cold(args)                          # (which says that ipykernel is missing)
    request = KernelRequest([spec.origin, *args], env, os.getcwd(), list(sys.path),
                            umask, tuple(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else ())
    fds = _stdio()
    for _ in range(3):                            # a server that refuses (its code changed) goes
        try:
            sock, _ = userzygote._connect_or_start(where, k, server_env(env), stem="kernels", module=MAIN,
                                                      python=python())
        except OSError:
            break
        try:
            if userdir.peer_uid(sock)[1] != os.getuid():
                break
            socket.send_fds(sock, [pickle.dumps(request)], fds)
            answer = userzygote._first_answer(sock, os.path.join(where, f"kernels-{k}.pid"), START_TIMEOUT)
        except OSError as exc:                    # (a refusal can come as a reset: userzygote.connect)
            answer = userzygote.Refused(str(exc))
        from labkit.runtime import protocol
        if isinstance(answer, protocol.Forked):
            _follow(sock, answer.pid)
        sock.close()
        if not isinstance(answer, userzygote.Refused):
            break                                 # no answer in time: not worth waiting again
    _exec_cold(args)


def install(name: str, prefix: str = sys.prefix) -> str:
    """Point the kernelspec `name` of this environment, as `python -m ipykernel install
    --sys-prefix --name NAME` wrote it, at the launcher (its interpreter flags, display name and
    logos stay); the path of its kernel.json."""
    import json
    path = os.path.join(prefix, "share", "jupyter", "kernels", name, "kernel.json")
    with open(path) as f:
        spec = json.load(f)
    argv = spec["argv"]
    at = next(i for i in range(len(argv) - 1) if argv[i] == "-m"
              and argv[i + 1] in ("ipykernel_launcher", __spec__.name if __spec__ else ""))
    argv[at + 1] = "labkit.runtime.local.kernels"
    spec["interrupt_mode"] = "signal"            # the launcher passes SIGINT on to the kernel
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


if __name__ == "__main__":                        # (run as __main__: its classes would pickle
    from labkit.runtime.local import kernels     # as __main__.KernelRequest, unknown to the server)
    if sys.argv[1:2] == ["install"]:             # install NAME [PREFIX]
        print(kernels.install(*sys.argv[2:4]))
    else:
        kernels.launch(sys.argv[1:])
