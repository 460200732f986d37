"""Has the code a process imported changed on disk since? (the learner's zygote, issue 36)

A zygote that outlives the notebook must never give a rank stale code: a `pip install` of
torch, an edit of labkit between two notebooks. `Watch()` is taken once the zygote has imported
what it forks with; `watch.changed()` names the first file that changed since (a module file
modified, touched, replaced, removed, or a package added or removed next to one), else ''.

Linux: inotify on the folders of every loaded module's file (a few hundred watches; the kernel
queues the events, so a change made before a notebook connects is read before it is served, and
the check costs one non-blocking read). Elsewhere, or when inotify is refused: the stamps
(inode, size, mtime, ctime) of every module file, compared on each check (a few ms per
thousand files).
"""
import ctypes
import os
import struct
import sys

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_ISDIR = 0x400, 0x800, 0x4000, 0x40000000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
        | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
_EVENT = struct.Struct("iIII")


def module_files() -> list:
    """The absolute paths of the files every loaded module came from."""
    files = set()
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and os.path.isabs(f):
            files.add(f)
    return sorted(files)


def _code(name: str, is_dir: bool) -> bool:
    """Does a change to this entry of a module folder matter (code, an extension, a package's
    metadata), or is it noise (a bytecode cache, an editor's backup)?"""
    if is_dir:
        return name != "__pycache__"
    return (name.endswith((".py", ".pth", ".pyd")) or ".so" in name
            or name.endswith((".dist-info", ".egg-info", ".egg-link")))


def _stamp(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Watch:
    """What the loaded modules' files are now; `changed()` says which one is no longer so."""

    def __init__(self, since_ns: int = None):
        """`since_ns`: when the importing began (time.time_ns()); a file changed after it may
        have been imported in its old version, so it counts as changed at once."""
        self.files = module_files()
        self.fd, self._dirs, self._why = None, {}, ""
        try:
            self._start_inotify()
        except (OSError, AttributeError):         # refused, or no inotify (macOS)
            self.close()
        self._stamps = {f: _stamp(f) for f in self.files}
        if since_ns is not None:
            self._why = next((f for f, s in self._stamps.items() if s is None or s[3] > since_ns), "")
        if self.fd is not None:
            self._stamps = {}

    def _start_inotify(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd = fd
        for d in sorted({os.path.dirname(f) for f in self.files}):
            wd = libc.inotify_add_watch(fd, os.fsencode(d), MASK)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
            self._dirs[wd] = d

    def fileno(self):
        return self.fd

    def changed(self) -> str:
        """The first changed file (or folder) since the watch began, else ''. Once said, said
        again on every later call."""
        if self._why:
            return self._why
        if self.fd is None:
            for f, stamp in self._stamps.items():
                if _stamp(f) != stamp:
                    self._why = f
                    break
            return self._why
        while not self._why:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            at = 0
            while at < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size:at + _EVENT.size + size].rstrip(b"\0").decode(errors="replace")
                at += _EVENT.size + size
                folder = self._dirs.get(wd, "?")
                if mask & (IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF):
                    self._why = folder
                elif _code(name, bool(mask & IN_ISDIR)):
                    self._why = os.path.join(folder, name)
                if self._why:
                    break
        return self._why

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
