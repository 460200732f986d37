"""A CPU cgroup of low weight for CI's parallel phase, so that the serial phase can run beside it.

The serial phase (root conftest.py: the tests that assert wall-clock times) used to run alone,
after the parallel one, for about three minutes in which it kept one core busy at most and
mostly waited (padded pipeline steps, heartbeats, a browser's page). Where this script can make
a cgroup, scripts/test starts both phases at once and puts the parallel phase (every process it
starts, the ranks and kernels included, whatever session they make) in this group of weight
WEIGHT_V1 or WEIGHT_V2 (the default of a process group is 1024 in cgroup v1, 100 in v2): while a serial test
wants a core it gets about 20 of every 21 parts of it, and the parallel phase takes what it
leaves. The parallel phase is never stopped outright (a cpu.idle group could be, for as long as
the serial tests keep both cores busy, and its tests have timeouts too).

    python scripts/ci_cgroup.py make      # prints the file to write a pid to, or nothing
    python scripts/ci_cgroup.py release FILE
                                          # moves what is left in it back, removes the group

`make` prints nothing (and scripts/test runs the phases one after the other, as before) where no
cgroup can be made: not root, no cpu controller, a read-only /sys/fs/cgroup (most containers).
`release` moves what outlives the phase (the learner's zygote of the parallel phase waits
LABKIT_ZYGOTE_IDLE before it exits) back to the group scripts/test ran in, so no process keeps
the low weight after CI; then it removes the group. Both only print and never fail CI.
"""
import os
import pathlib
import sys

ROOT = pathlib.Path("/sys/fs/cgroup")
WEIGHT_V1 = 51              # cpu.shares (default 1024): a twentieth of a normal process group
WEIGHT_V2 = 5               # cpu.weight (default 100): the same share


def _own(root: pathlib.Path, controller: str, proc_cgroup: str):
    """This process's group in a hierarchy, from /proc/self/cgroup's text: the v1 line naming
    `controller`, or the v2 line ("0::/path") when controller is empty."""
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and names == ""):
            return root / path.lstrip("/")
    return None


def make(root: pathlib.Path = ROOT, proc_cgroup: str = None, name: str = None):
    """The procs file of a new group of low CPU weight under this process's own (v1's cpu
    controller where it is mounted, else v2 with its cpu controller on), or None."""
    proc_cgroup = proc_cgroup if proc_cgroup is not None else pathlib.Path("/proc/self/cgroup").read_text()
    name = name or f"labkit-ci-{os.getpid()}"
    v1 = _own(root / "cpu", "cpu", proc_cgroup) if (root / "cpu" / "cpu.shares").exists() else None
    if v1 is not None:
        weight_file, weight = "cpu.shares", WEIGHT_V1
        parent = v1
    else:
        v2 = _own(root, "", proc_cgroup)
        control = v2 / "cgroup.subtree_control" if v2 is not None else None
        if control is None or not control.exists() or "cpu" not in control.read_text().split():
            return None
        weight_file, weight, parent = "cpu.weight", WEIGHT_V2, v2
    group = parent / name
    try:
        group.mkdir(exist_ok=True)
        (group / weight_file).write_text(f"{weight}\n")
    except OSError:
        try:
            group.rmdir()
        except OSError:
            pass
        return None
    return group / "cgroup.procs"


def release(procs: pathlib.Path) -> list:
    """Moves every process still in the group to its parent's group and removes it; returns the
    pids moved."""
    group = procs.parent
    moved = []
    for _ in range(5):                  # a process may fork while we move the others
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            return moved
        if not pids:
            break
        for pid in pids:
            try:
                (group.parent / "cgroup.procs").write_text(f"{pid}\n")
                if pid not in moved:
                    moved.append(pid)
            except OSError:             # it ended meanwhile
                pass
    try:
        group.rmdir()
    except OSError as exc:
        print(f"ci_cgroup: could not remove {group}: {exc}", file=sys.stderr)
    return moved


def main(argv) -> int:
    if argv[:1] == ["make"]:
        try:
            procs = make()
        except OSError:
            procs = None
        if procs is not None:
            print(procs)
        return 0
    if argv[:1] == ["release"] and len(argv) == 2:
        moved = release(pathlib.Path(argv[1]))
        if moved:
            print(f"ci_cgroup: {len(moved)} process(es) left by the parallel phase moved back to the normal weight")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
