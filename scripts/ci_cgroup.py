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
    python scripts/ci_cgroup.py slower FACTOR COMMAND...
                                          # runs COMMAND with this machine's CPU divided by FACTOR

`slower` emulates a slower machine of the same core count, for CI's time and its timing verdicts
on the slower machine kind when only a faster one is at hand: COMMAND and everything it starts
run in a group whose CPU time is capped at cores / FACTOR (v1 cpu.cfs_quota_us, v2 cpu.max) in
periods of PERIOD_US, so a CPU-bound stretch takes FACTOR times as long. It is an emulation: each
core still runs at full speed within the cap (a single thread is not slowed while the others
idle), and the cap pauses the whole group at the end of a period where it has used its share
(at most PERIOD_US x (1 - 1 / FACTOR) at a time), which a slower CPU does not. The exit status
is COMMAND's; the group is removed after it (`release`). Needs root and a cpu controller.

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
PERIOD_US = 10000           # `slower`'s quota period: short, so a pause at its end is at most a few ms


def _own(root: pathlib.Path, controller: str, proc_cgroup: str):
    """This process's group in a hierarchy, from /proc/self/cgroup's text: the v1 line naming
    `controller`, or the v2 line ("0::/path") when controller is empty."""
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and names == ""):
            return root / path.lstrip("/")
    return None


def _own_cpu_group(root: pathlib.Path, proc_cgroup: str = None):
    """(this process's group, "v1" or "v2") where a cpu group can be made under it, else None
    (`proc_cgroup`: /proc/self/cgroup's text, read when not given)."""
    proc_cgroup = proc_cgroup if proc_cgroup is not None else pathlib.Path("/proc/self/cgroup").read_text()
    v1 = _own(root / "cpu", "cpu", proc_cgroup) if (root / "cpu" / "cpu.shares").exists() else None
    if v1 is not None:
        return v1, "v1"
    v2 = _own(root, "", proc_cgroup)
    control = v2 / "cgroup.subtree_control" if v2 is not None else None
    if control is None or not control.exists() or "cpu" not in control.read_text().split():
        return None
    return v2, "v2"


def _new_group(parent: pathlib.Path, name: str, settings: dict):
    """parent/name with `settings` ({file: text}) written, or None (and nothing left) if it cannot be."""
    group = parent / name
    try:
        group.mkdir(exist_ok=True)
        for file, text in settings.items():
            (group / file).write_text(text)
    except OSError:
        try:
            group.rmdir()
        except OSError:
            pass
        return None
    return group / "cgroup.procs"


def make_slower(factor: float, cores: int = None, root: pathlib.Path = ROOT, proc_cgroup: str = None,
                name: str = None):
    """The procs file of a new group under this process's own whose CPU is capped at cores /
    factor (`slower`), or None where none can be made."""
    if not factor >= 1:
        raise ValueError(f"FACTOR must be 1 or more (a slower machine), not {factor}")
    cores = cores or len(os.sched_getaffinity(0))
    found = _own_cpu_group(root, proc_cgroup)
    if found is None:
        return None
    parent, version = found
    quota = max(1000, round(PERIOD_US * cores / factor))
    settings = ({"cpu.cfs_period_us": f"{PERIOD_US}\n", "cpu.cfs_quota_us": f"{quota}\n"} if version == "v1"
                else {"cpu.max": f"{quota} {PERIOD_US}\n"})
    return _new_group(parent, name or f"labkit-slower-{os.getpid()}", settings)


def make(root: pathlib.Path = ROOT, proc_cgroup: str = None, name: str = None):
    """The procs file of a new group of low CPU weight under this process's own (v1's cpu
    controller where it is mounted, else v2 with its cpu controller on), or None."""
    found = _own_cpu_group(root, proc_cgroup)
    if found is None:
        return None
    parent, version = found
    weight = {"cpu.shares": f"{WEIGHT_V1}\n"} if version == "v1" else {"cpu.weight": f"{WEIGHT_V2}\n"}
    return _new_group(parent, name or f"labkit-ci-{os.getpid()}", weight)


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
    if argv[:1] == ["slower"] and len(argv) >= 3:
        return slower(float(argv[1]), argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


def slower(factor: float, command: list) -> int:
    """Runs `command` in a group of make_slower(factor); its exit status (127 if it cannot start)."""
    import subprocess
    cores = len(os.sched_getaffinity(0))
    try:
        procs = make_slower(factor, cores)
    except OSError:
        procs = None
    if procs is None:
        print("ci_cgroup: no CPU cgroup can be made here (root and a cpu controller are needed)", file=sys.stderr)
        return 2
    procs.write_text(f"{os.getpid()}\n")             # the command and all it starts inherit the cap
    shown = " ".join(command).split("\n")[0]
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    print(f"ci_cgroup: slower: {shown} with {cores / factor:.2f} of {cores} core(s) ({procs.parent})",
          file=sys.stderr, flush=True)
    try:
        return subprocess.call(command)
    except OSError as exc:
        print(f"ci_cgroup: {command[0]}: {exc}", file=sys.stderr)
        return 127
    finally:
        release(procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
