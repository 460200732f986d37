"""What the kernel shows root about other users' processes: who runs, who listens on which port,
which files a user owns in the shared temporary folders (for the tests of a class on one node).

Read from /proc as root, so nothing here depends on how labkit names or tracks its processes.
"""
from __future__ import annotations

import os
import pathlib

SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def pids_of(uid: int) -> list:
    """Every process (zombies included) whose real uid is `uid`."""
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if d.stat().st_uid == uid:
                out.append(int(d.name))
        except FileNotFoundError:
            pass
    return sorted(out)


def describe(pid: int) -> str:
    try:
        cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        state = next(ln for ln in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
                     if ln.startswith("State:"))
        return f"pid {pid} [{state[6:].strip()}] {cmd[:120]}"
    except (OSError, StopIteration):
        return f"pid {pid} (gone)"


def _parent(pid: int):
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _driver(pid: int):
    """LABKIT_DRIVER_PID in a process's environment: the notebook a labkit worker belongs to."""
    try:
        env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"LABKIT_DRIVER_PID="):
            return int(kv.split(b"=", 1)[1])
    return None


def family(root: int, uid: int) -> set:
    """`root` and every process of `uid` descended from it or naming it as its labkit driver."""
    mine = pids_of(uid)
    fam = {root}
    grew = True
    while grew:
        grew = False
        for p in mine:
            if p not in fam and (_parent(p) in fam or _driver(p) == root):
                fam.add(p)
                grew = True
    return fam


def _listening_inodes(pid="self") -> dict:
    """socket inode -> (address, port) of every listening TCP socket in the network namespace of
    process `pid` (this process's by default)."""
    out = {}
    for name in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            rows = pathlib.Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] != "0A":                           # TCP_LISTEN
                continue
            addr, port = f[1].rsplit(":", 1)
            out[int(f[9])] = (addr, int(port, 16))
    return out


def net_namespace(pid) -> int:
    """The inode of the network namespace process `pid` is in (0 if it cannot be read)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return 0


def listening_ports(pids, own_namespace=False) -> dict:
    """pid -> set of TCP ports the process holds a listening socket for: in this process's
    network namespace, or (own_namespace) in the process's own one (a local cluster's ranks
    live in a namespace of their own, labkit/runtime/local/netns.py)."""
    inodes = _listening_inodes()
    out = {}
    for pid in pids:
        if own_namespace:
            inodes = _listening_inodes(pid)
        ports = set()
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                hit = inodes.get(int(link[8:-1]))
                if hit:
                    ports.add(hit[1])
        out[pid] = ports
    return out


def owned_files(uid: int, home: str) -> set:
    """Entries owned by `uid` at the top of the shared temporary folders, and every path under
    its home (two levels down), as strings."""
    found = set()
    for d in SHARED_DIRS:
        try:
            for e in os.scandir(d):
                try:
                    if e.stat(follow_symlinks=False).st_uid == uid:
                        found.add(e.path)
                except FileNotFoundError:
                    pass
        except OSError:
            pass
    base = pathlib.Path(home)
    for depth in ("*", "*/*", "*/*/*"):
        found.update(str(p) for p in base.glob(depth))
    return found
