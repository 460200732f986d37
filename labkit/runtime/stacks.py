"""Where a rank is: its Python frames, from a traceback or from a faulthandler dump (SIGUSR1, which
works while the rank is inside a C++ collective), in the learner's words ("Cell In[7], line 3");
the kernel's state of its process; the folders the dumps are written to (and those a killed
notebook or node agent left behind).
"""
import linecache
import os
import re
import shutil
import tempfile
from typing import Optional

from labkit.i18n.messages import tr

_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))


# -- frames ------------------------------------------------------------------------------
def _short_path(filename: str) -> str:
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def where(filename: str, lineno: int) -> str:
    """'Cell In[7], line 3' for notebook cells, else a short path and line."""
    try:
        from IPython import get_ipython
        ip = get_ipython()
        named = ip.compile.format_code_name(filename) if ip is not None else None
        if named:
            return f"{named[0]} {named[1]}, line {lineno}"
    except Exception:
        pass
    return f"{_short_path(filename)}, line {lineno}"


def is_runtime(filename: str) -> bool:
    """The worker's own frames (and the interpreter's start-up) are not the learner's."""
    if filename.startswith("<frozen "):
        return True
    folder = os.path.dirname(os.path.abspath(filename))      # runtime/, runtime/local, runtime/remote
    return folder == _RUNTIME_DIR or os.path.dirname(folder) == _RUNTIME_DIR


REPEATS_SHOWN = 3      # as CPython: a frame repeated more often shows 3 times, then a count


def format_frames(frames, innermost_first: bool = False, limit: int = None) -> str:
    """Render (filename, lineno, name, line) frames, outermost first as Python does; the
    runtime's own frames are left out and a frame repeated more than 3 times in a row (deep
    recursion) is shown 3 times, then ``[Previous line repeated N more times]``."""
    frames = [f for f in frames if not is_runtime(f[0])]
    if innermost_first:
        frames = frames[::-1]
    if limit:
        frames = frames[-limit:]
    out, last, count = [], None, 0

    def repeated():
        if count > REPEATS_SHOWN:
            n = count - REPEATS_SHOWN
            out.append(f"  [Previous line repeated {n} more time{'s' if n > 1 else ''}]")

    for filename, lineno, name, line in frames:
        key = (filename, lineno, name)
        if key == last:
            count += 1
            if count > REPEATS_SHOWN:
                continue
        else:
            repeated()
            last, count = key, 1
        line = (line or linecache.getline(filename, lineno)).strip()
        out.append(f"  {where(filename, lineno)}, in {name}" + (f"\n    {line}" if line else ""))
    repeated()
    return "\n".join(out)


def in_collective(frames) -> bool:
    """Is a stack (from `parse_dump`) inside torch.distributed (a collective or a send/recv),
    or inside labkit's own collectives (labkit/comm: rings of isend/irecv, whose innermost
    Python frame is labkit's while it waits in C++)?"""
    markers = (f"torch{os.sep}distributed{os.sep}", f"labkit{os.sep}comm{os.sep}")
    return any(m in f[0] for f in frames for m in markers)



# -- stacks from faulthandler dumps ------------------------------------------------------
_THREAD = re.compile(r"thread (0x[0-9a-fA-F]+)", re.IGNORECASE)
_FRAME = re.compile(r'File "(.*)", line (\d+) in (.+)$')


def parse_dump(text: str, main_ident: Optional[int]) -> list:
    """Frames (innermost first) of the main thread in the last faulthandler dump of `text`."""
    threads, current = {}, None
    for raw in text.splitlines():
        m = _THREAD.search(raw)
        if m and raw.rstrip().endswith(":"):
            current = int(m.group(1), 16)
            threads[current] = []                  # a later dump replaces an earlier one
            continue
        m = _FRAME.search(raw)
        if m and current is not None:
            threads[current].append((m.group(1), int(m.group(2)), m.group(3).strip(), None))
    if main_ident in threads:
        return threads[main_ident]
    return next(iter(threads.values()), [])


def describe_stack(frames: list, limit: int = 4) -> str:
    """'in recv()' plus the innermost `limit` frames (from a dump, innermost first), printed
    outermost first as a Python traceback is, the learner's lines with their source."""
    shown = [f for f in frames if not is_runtime(f[0])]
    if not shown:
        return tr("idle (waiting for work)")
    head = tr("in {name}() (most recent call last):", name=shown[0][2])
    return head + "\n" + format_frames(shown, innermost_first=True, limit=limit)


# -- processes and the folders their dumps go to ---------------------------------------------
def proc_state(pid) -> str:
    """The kernel's one-letter state of a process (R, S, D, T stopped, Z ...), '' if gone.
    From /proc on Linux; elsewhere (macOS, LABKIT_PORTABLE=1) from `ps -o stat=`, whose first
    letter is the same (macOS's U, uninterruptible, reads as D, and I, idle, as S)."""
    from labkit.runtime import portable
    if not portable.PROC:
        return _ps_state(pid)
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def zombie_status(pid):
    """The wait status of a process that has exited but is not reaped yet (a zombie whose parent
    cannot run), from /proc/<pid>/stat (field 52, Linux >= 3.5); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[49]) if fields[0] == "Z" else None
    except (OSError, IndexError, ValueError):
        return None


def _ps_state(pid) -> str:
    import subprocess
    try:
        out = subprocess.run(["ps", "-o", "stat=", "-p", str(int(pid))], capture_output=True,
                             text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError, ValueError):
        return ""
    return {"U": "D", "I": "S"}.get(out[:1], out[:1])


def make_stack_dir() -> str:
    """A fresh folder for this process's stack dumps, named after the notebook's pid; folders
    of notebooks that no longer run (killed without cleaning up) are removed first."""
    remove_stale_dirs()
    return tempfile.mkdtemp(prefix=f"labkit-{os.getpid()}-")


def remove_stale_dirs(root: str = None, prefix: str = "labkit-") -> list:
    """Remove <prefix><pid>-* folders of this user whose process <pid> is gone (a notebook's
    stack folders, "labkit-"; a node agent's, "labkit-agent-"): what a SIGKILL left behind."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = re.fullmatch(re.escape(prefix) + r"(\d+)-\w+", name)
        path = os.path.join(root, name)
        if not m:
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(m.group(1)), 0)
            continue                              # its notebook still runs
        except ProcessLookupError:
            pass
        except (PermissionError, OSError):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
