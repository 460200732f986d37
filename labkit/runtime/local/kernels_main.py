"""The learner's kernels' server (the launcher's side and the design: kernels.py).

    python -m labkit.runtime.local.kernels_main LISTEN_FD FOLDER KEY IDLE_SECONDS

It imports torch and ipykernel once, accepts its own user's launchers only (SO_PEERCRED, every
connection: userzygote_main.Server) and forks each one a kernel, which takes on the launcher's
fds 0-2, environment, folder, sys.path, umask and cores before it starts ipykernel. It imports
no matplotlib: the backend is chosen from the environment as matplotlib imports, and each
kernel's is its own (ipykernel sets the inline one). labkit's own modules are dropped in the
kernel: the learner's `import labkit` runs afresh there (and starts the learner's zygote early,
labkit/__init__.py).
"""
import os
import pickle
import signal
import socket
import sys

from labkit.runtime import protocol
from labkit.runtime.local import userzygote_main as um
from labkit.runtime.local.kernels import KernelRequest    # (now: see userzygote_main's imports)

IMPORTS = ("torch", "torch.distributed", "ipykernel.kernelapp", "ipykernel.ipkernel",
           "ipykernel.zmqshell", "IPython.core.interactiveshell", "jupyter_client.session")


class KernelServer(um.Server):
    stem = "kernels"
    imports = IMPORTS
    subreaper = False                             # a kernel's children are its own (Jupyter's)

    def loaded(self) -> None:                     # (no ranks: nothing to snapshot, no one adopted)
        pass

    def tidy(self) -> None:
        pass

    def serve(self, client: um.Client) -> None:
        try:
            msg, fds, _, _ = socket.recv_fds(client.sock, 1 << 20, 4)
        except OSError:
            msg, fds = b"", []
        try:
            request = pickle.loads(msg) if msg and client.hello is None else None
        except Exception:                         # noqa: BLE001 - not a launcher of ours
            request = None
        if not isinstance(request, KernelRequest) or len(fds) != 3:
            for fd in fds:                        # (EOF, a second message, or not a launcher)
                os.close(fd)
            self.drop(client)                     # its kernel, if any, goes with it
            return
        client.hello, self.served = request, True
        close = self._fds_to_close(client)        # (before the fork: nothing can raise after)
        try:
            pid = os.fork()
        except OSError:                           # (out of processes): the launcher execs
            pid = None
        if pid == 0:
            become_kernel(request, fds, close, self)
        for fd in fds:
            os.close(fd)
        if pid is None:
            self.drop(client)
            return
        client.children.add(pid)
        self.owner[pid] = client
        self.send(client, protocol.Forked(pid))


def become_kernel(request, fds: list, close: list, server) -> None:
    """In a fresh fork: shed the server's state, take on the launcher's, run ipykernel, and
    exit with its status. Never returns."""
    code = 1
    try:
        os.setsid()                               # its own group: killed as one (kernels.py)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        server.sel.close()
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        for i, fd in enumerate(fds):
            os.dup2(fd, i)                        # (inheritable, as a spawned kernel's are)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.umask(request.umask)
        os.environ.clear()
        os.environ.update(request.env)
        os.chdir(request.cwd)
        if request.cpus:
            os.sched_setaffinity(0, request.cpus)
        if "torch" in sys.modules:               # (the server has one thread: kernels.server_env)
            sys.modules["torch"].set_num_threads(fresh_threads(request.env, request.cpus))
        sys.path[:] = request.path
        sys.argv[:] = request.argv
        for name in [n for n in sys.modules if n == "labkit" or n.startswith("labkit.")]:
            del sys.modules[name]                 # the learner's `import labkit` runs afresh
        if "torch" in sys.modules:               # a fresh process's seed is its own; forks
            sys.modules["torch"].seed()           # share torch's (random and numpy reseed at fork)
        code = _run_ipykernel()
    except BaseException:                         # noqa: B902 - never return into the loop
        import traceback
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:                     # noqa: BLE001
                pass
        os._exit(code)


def fresh_threads(env: dict, cpus: tuple) -> int:
    """torch's threads in a fresh process of this environment and these cores: OMP_NUM_THREADS
    (its first number), else one per core it may run on."""
    try:
        n = int(env.get("OMP_NUM_THREADS", "").split(",")[0])
    except ValueError:
        n = 0
    return n if n > 0 else len(cpus or os.sched_getaffinity(0))


def _run_ipykernel() -> int:
    """What ipykernel_launcher.py runs, and the interpreter's exit: its status."""
    import atexit
    from pathlib import Path
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]                           # (ipykernel_launcher does the same)
    code = 0
    try:
        from ipykernel import kernelapp
        kernelapp.launch_new_instance()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:                         # noqa: B902 - as the interpreter would
        import traceback
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()                       # the history's last save, the kernel's cleanup
    return code


if __name__ == "__main__":
    um.main(KernelServer)
