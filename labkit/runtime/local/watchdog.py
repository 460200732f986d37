"""Ranks die with their notebook where Linux's PR_SET_PDEATHSIG is missing (macOS, or
LABKIT_PORTABLE=1; see portable.py).

On Linux each worker asks the kernel to SIGKILL it when its parent goes
(`worker.die_with_parent`); that works even when the rank is stopped or holds Python's lock in
C code, when none of its own threads can run. Elsewhere one small process per notebook does the
same from outside. The notebook writes ``+<pid>`` on a pipe for each worker it starts and
``-<pid>`` once it has reaped one; when the pipe closes (the notebook exited or was killed, even
by SIGKILL: the kernel closes its end) the watchdog SIGKILLs the process group of every worker
still listed (each worker leads its own), then exits. It runs in a session of its own, so a
signal to the notebook's process group does not take it down first. It imports nothing of
labkit or torch (a bare interpreter, ~30 ms to start).

    notebook --"+pid" / "-pid" (pipe)--> watchdog --(EOF)--> killpg(pid, SIGKILL) for each pid
"""
import os
import subprocess
import sys
import threading

from labkit.runtime import portable

NEEDED = not portable.PRCTL          # where the kernel cannot do it for us

_WATCHDOG = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
pids = set()
for line in sys.stdin.buffer:                  # blocks; EOF once the notebook is gone
    word = line.strip()
    if word[:1] == b"+":
        pids.add(int(word[1:]))
    elif word[:1] == b"-":
        pids.discard(int(word[1:]))
for pid in pids:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""

_lock = threading.Lock()
_proc = None
_owner = None                        # the pid that started it (a forked child starts its own)


def _tell(line: str) -> None:
    global _proc, _owner
    with _lock:
        if _proc is None or _owner != os.getpid() or _proc.poll() is not None:
            _proc = subprocess.Popen([sys.executable, "-I", "-c", _WATCHDOG],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=True,
                                     start_new_session=True)
            _owner = os.getpid()
        try:
            _proc.stdin.write(line.encode())
            _proc.stdin.flush()
        except OSError:                          # it died: the next line starts a new one
            _proc = None


def watch(pid: int) -> None:
    """Kill worker `pid` (and its process group) when this process is gone."""
    if NEEDED:
        _tell(f"+{pid}\n")


def forget(pid: int) -> None:
    """Worker `pid` has been reaped: its pid may be reused, leave it alone."""
    if NEEDED and _proc is not None:
        _tell(f"-{pid}\n")


def pid():
    """The watchdog's pid, or None when none runs (tests)."""
    return _proc.pid if _proc is not None and _proc.poll() is None else None
