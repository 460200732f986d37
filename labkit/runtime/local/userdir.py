"""Where the learner's zygote lives and which one a notebook may use (userzygote.py): this
user's private folder, the zygote's key, the peer's uid on a Unix socket, and the zygote as a
process that is not our child (`Peer`)."""
import hashlib
import importlib.util
import os
import select
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time


def safe_folder(path: str) -> str:
    """`path`, made 0700 if missing; PermissionError if it is a link, not a folder, another
    user's, or open to anyone else (then nothing in it is trusted)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a folder")
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this user ({os.getuid()})")
    if st.st_mode & 0o077:
        raise PermissionError(f"{path} is open to other users (mode {oct(st.st_mode & 0o777)})")
    return path


def folder() -> str:
    """This user's folder for the zygote's socket, lock and log (see the module docstring)."""
    places = [os.path.join(tempfile.gettempdir(), f"labkit-zygote-{os.getuid()}")]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        places.insert(0, os.path.join(xdg, "labkit"))
    why = None
    for p in places:
        try:
            return safe_folder(p)
        except OSError as exc:
            why = exc
    raise why


IMPORT_PREFIXES = ("TORCH", "PYTORCH", "ATEN_", "ONEDNN_", "DNNL_", "OMP_", "KMP_", "GOMP_",
                   "MKL_", "OPENBLAS", "CUDA", "NCCL_", "GLOO_", "TRITON", "MALLOC", "NUMPY",
                   "LD_", "LABKIT_PRELOAD", "LABKIT_PORTABLE")
IMPORT_NAMES = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
                "PYTHONSAFEPATH", "HOME", "TMPDIR", "LABKIT_ZYGOTE_IDLE")
PER_RANK = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")   # set per cluster, and by torch.set_num_threads


def import_vars(env: dict) -> dict:
    """The variables of `env` that torch, numpy or the interpreter may read while importing."""
    return {k: v for k, v in env.items()
            if (k.startswith(IMPORT_PREFIXES) or k in IMPORT_NAMES) and k not in PER_RANK}


def key(env: dict) -> str:
    torch = sys.modules.get("torch")
    origin = getattr(torch, "__file__", None) or getattr(importlib.util.find_spec("torch"), "origin", "")
    from labkit.runtime.local import procs
    parts = [sys.executable, sys.prefix, sys.version, procs._LABKIT_ROOT, os.path.realpath(origin or ""),
             sorted(import_vars(env).items())]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def peer_uid(sock) -> tuple:
    """(pid, uid) of the process at the other end of a Unix socket (SO_PEERCRED)."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))
    return pid, uid


class Peer:
    """The learner's zygote when another notebook started it: the Popen subset that pool.py and
    zygote.py use (pid, wait, kill, poll); how it ended is known only to its parent."""
    returncode = None

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self._fd = os.pidfd_open(pid)
        except OSError:
            self._fd = None

    def poll(self):
        if self._fd is None:
            return 0
        r = select.poll()
        r.register(self._fd, select.POLLIN)
        return 0 if r.poll(0) else None

    def wait(self, timeout: float = None):
        deadline = time.monotonic() + (timeout or 0)
        while self.poll() is None:
            if timeout is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("the learner's zygote", timeout)
            time.sleep(0.02)
        return None                               # gone; its exit status went to its parent

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def kill(self) -> None:
        import signal
        try:
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
        except OSError:
            pass


def remove_cluster_folder(path: str) -> None:
    """A notebook gone without closing its cluster leaves its folder: remove it (only such a
    folder: labkit-<pid>-... in the temp folder, this user's). The notebook may be removing it
    at the same moment (a cluster closed as its zygote hears of it): a folder already gone is
    no error. (The learner's zygote once died here, for all of its notebooks, of a
    FileNotFoundError between a check and an lstat.)"""
    import shutil
    import stat
    try:
        if (os.path.dirname(os.path.realpath(path)) != os.path.realpath(tempfile.gettempdir())
                or not os.path.basename(path).startswith("labkit-")):
            return
        st = os.lstat(path)
    except (OSError, TypeError, ValueError):
        return
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
        shutil.rmtree(path, ignore_errors=True)
