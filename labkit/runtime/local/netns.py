"""A private network for one local cluster's ranks (Linux): a network namespace of their own.

gloo's ranks talk over TCP listeners on loopback with no authentication, and every local user
can see and connect to a loopback port (/proc/net/tcp lists them with their owner). In a network
namespace of their own the ranks' loopback is theirs alone: no process outside it can see their
sockets or connect to them. Every rank of one cluster (the zygote's forks and spawned workers
alike) joins the same namespace, so they reach each other as before.

    notebook                         helper (python -m labkit.runtime.local.netns FD)
    make() -- socketpair ------->    unshare(CLONE_NEWNET) (root) or
                                     unshare(CLONE_NEWUSER | CLONE_NEWNET) (another user, where
                                     the kernel allows it), `lo` up (ioctl SIOCSIFFLAGS)
           <-- b"ok" + fds of /proc/self/ns/{user,net} (SCM_RIGHTS); it exits
    Private(fds): held by the pool for the cluster's life (an open fd keeps a namespace alive)
    zygote, spawned worker: enter() first thing (setns into each fd), while single-threaded

The notebook never enters the namespace; it reaches the ranks through a Unix socket in the
cluster's 0700 folder (pathname Unix sockets work across network namespaces: control.py).

Where it cannot be made (macOS, LABKIT_PORTABLE=1, LABKIT_NETNS=0, unprivileged user namespaces
refused by sysctl, AppArmor or seccomp, a container without CAP_SYS_ADMIN), `make()` returns
the reason and the cluster says in one line that other local users can reach the ranks' gloo
ports (docs/teaching.md, the threat model).
"""
import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
VAR = "LABKIT_NETNS_FDS"          # the namespace fds a worker enters at start (popped there)


def wanted() -> str:
    """'' if this system should try a private namespace, else why not (for the warning)."""
    from labkit.runtime import portable
    if os.environ.get("LABKIT_NETNS", "1") == "0":
        return "LABKIT_NETNS=0 is set"
    if not portable.NETNS:
        return portable.why_not("a private network namespace")
    return ""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args) -> None:
    if getattr(_libc(), name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{name}: {os.strerror(e)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def loopback_up() -> None:
    """Bring `lo` up in this process's network namespace (a new one starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack_from("h", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req), 16)[0]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))


def unshare_here() -> list:
    """In this (single-threaded) process: a new network namespace, inside a new user namespace
    unless we are root; `lo` up. Returns the names of the namespaces made ("user", "net")."""
    uid, gid = os.geteuid(), os.getegid()
    tries = [["net"], ["user", "net"]] if uid == 0 else [["user", "net"]]
    why = None
    for kinds in tries:
        flags = CLONE_NEWNET | (CLONE_NEWUSER if "user" in kinds else 0)
        try:
            _call("unshare", flags)
        except OSError as exc:
            why = exc
            continue
        if "user" in kinds:                       # our own uid and gid, nobody else's
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
            _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        loopback_up()
        return kinds
    raise why


def _helper(fd: int) -> None:
    """The helper process: make the namespaces, send their fds back, exit."""
    sock = socket.socket(fileno=fd)
    try:
        kinds = unshare_here()
        fds = [os.open(f"/proc/self/ns/{k}", os.O_RDONLY | os.O_CLOEXEC) for k in kinds]
        socket.send_fds(sock, [("ok " + ",".join(kinds)).encode()], fds)
    except BaseException as exc:                  # noqa: B902 - said to the notebook
        text = f"{type(exc).__name__}: {exc}"
        sock.send(("error " + text).encode()[:4000])


class Private:
    """The namespaces of one cluster's ranks, held open by the notebook (kinds, fds)."""

    def __init__(self, kinds: list, fds: list):
        self.kinds, self.fds = kinds, fds

    def env(self) -> dict:
        """What a worker needs to enter them: the fds, passed with `pass_fds=self.fds`."""
        return {VAR: ",".join(f"{k}={fd}" for k, fd in zip(self.kinds, self.fds))}

    def close(self) -> None:
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


def make(timeout: float = 30.0):
    """(Private, '') for a new private network, or (None, why it cannot be made here)."""
    why = wanted()
    if why:
        return None, why
    try:
        return _make(timeout)
    except Exception as exc:                      # noqa: BLE001 - no helper process: say why
        return None, f"{type(exc).__name__}: {exc}"


def _make(timeout: float):
    from labkit.runtime.local import procs
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        env = procs.worker_env(1)
        proc = procs._launcher(lambda: subprocess.Popen(
            [sys.executable, "-I", "-S", "-c",
             "import sys; sys.path.insert(0, sys.argv[2]); "
             "from labkit.runtime.local import netns; netns._helper(int(sys.argv[1]))",
             str(theirs.fileno()), procs._LABKIT_ROOT],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env, close_fds=True, pass_fds=(theirs.fileno(),)))
        theirs.close()
        ours.settimeout(timeout)
        try:
            msg, fds, _, _ = socket.recv_fds(ours, 4096, 4)
        except OSError as exc:
            msg, fds = f"error {exc}".encode(), []
        err = b""
        try:
            err = proc.communicate(timeout=timeout)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        ours.close()
        theirs.close()
    text = msg.decode(errors="replace")
    if text.startswith("ok ") and fds:
        for fd in fds:
            os.set_inheritable(fd, False)
        return Private(text[3:].split(","), fds), ""
    for fd in fds:
        os.close(fd)
    why = text[6:] if text.startswith("error ") else (err or b"").decode(errors="replace").strip()
    return None, _explain(why or "the helper process said nothing")


def _explain(why: str) -> str:
    """The kernel's refusal, with the setting that usually causes it."""
    hints = []
    for path, bad in (("/proc/sys/kernel/unprivileged_userns_clone", "0"),
                      ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
                      ("/proc/sys/user/max_user_namespaces", "0")):
        try:
            with open(path) as f:
                if f.read().strip() == bad:
                    hints.append(f"{path[len('/proc/sys/'):].replace('/', '.')} = {bad}")
        except OSError:
            pass
    return why + (f" ({', '.join(hints)})" if hints else "")


def enter() -> None:
    """In a worker or the zygote, first thing (single-threaded): join the cluster's namespaces
    named in LABKIT_NETNS_FDS (user first, then net), close the fds, forget the variable. A
    worker that cannot join must not run outside them: it raises."""
    spec = os.environ.pop(VAR, "")
    if not spec:
        return
    pairs = [item.split("=") for item in spec.split(",")]
    try:
        for kind, fd in pairs:
            _call("setns", int(fd), CLONE_NEWUSER if kind == "user" else CLONE_NEWNET)
    finally:
        for _, fd in pairs:
            try:
                os.close(int(fd))
            except OSError:
                pass


__all__ = ["make", "enter", "Private", "wanted", "loopback_up", "unshare_here"]
