"""scripts/ci_cgroup.py: the low-weight CPU group CI's parallel phase runs in, beside the serial
phase (scripts/test). On folders laid out as cgroup v1 and v2, then, where this process may make
one (root, a cpu controller: CI), on the machine's own: a process put in the group gets its low
weight and is back at the normal one after `release`, and the group is gone."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _helper():
    spec = importlib.util.spec_from_file_location("ci_cgroup", ROOT / "scripts" / "ci_cgroup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _v1(tmp_path, own="/"):
    (tmp_path / "cpu" / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (tmp_path / "cpu" / "cpu.shares").write_text("1024\n")
    (tmp_path / "cpu" / own.lstrip("/") / "cgroup.procs").write_text("")
    return f"9:name=systemd:/\n4:memory:/elsewhere\n2:cpu,cpuacct:{own}\n0::/\n"


def test_v1_group_under_this_process_own_with_a_twentieth_of_the_weight(tmp_path):
    ci = _helper()
    procs = ci.make(tmp_path, _v1(tmp_path, "/docker/abc"), name="g")
    assert procs == tmp_path / "cpu" / "docker" / "abc" / "g" / "cgroup.procs"
    shares = int((procs.parent / "cpu.shares").read_text())
    assert shares * 20 <= 1024 < shares * 21


def test_v2_needs_the_cpu_controller_on_for_the_children(tmp_path):
    ci = _helper()
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    assert ci.make(tmp_path, "0::/\n", name="g") is None, "no cpu controller for the children: no group"
    assert not (tmp_path / "g").exists()
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
    procs = ci.make(tmp_path, "0::/\n", name="g")
    assert procs == tmp_path / "g" / "cgroup.procs"
    assert int((tmp_path / "g" / "cpu.weight").read_text()) * 20 <= 100


def test_nowhere_to_make_one_gives_none(tmp_path):
    ci = _helper()
    assert ci.make(tmp_path, "0::/\n", name="g") is None                     # neither hierarchy
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.shares").write_text("1024\n")
    assert ci.make(tmp_path, "2:cpu,cpuacct:/not/there\n", name="g") is None  # own group missing
    assert not (tmp_path / "cpu" / "not").exists()


def test_the_command_line_says_how_to_call_it():
    ci = _helper()
    assert ci.main(["release"]) == 2 and ci.main(["nonsense"]) == 2


def _cpu_group(pid: int) -> str:
    for line in pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if "cpu" in names.split(","):
            return path
    return ""


def test_on_this_machine_a_process_gets_the_low_weight_and_release_gives_it_back():
    ci = _helper()
    try:
        procs = ci.make()
    except OSError:
        procs = None
    if procs is None:
        pytest.skip("no CPU cgroup can be made here (not root, or no cpu controller): "
                    "scripts/test runs its serial phase after the parallel one")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        before = _cpu_group(sleeper.pid)
        procs.write_text(f"{sleeper.pid}\n")
        assert _cpu_group(sleeper.pid).endswith("/" + procs.parent.name)
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_cgroup.py"), "release", str(procs)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert "1 process(es)" in out.stdout, out.stdout
        assert _cpu_group(sleeper.pid) == before, "release left the process in the low-weight group"
        assert not procs.parent.exists(), "release left the group behind"
    finally:
        sleeper.kill()
        sleeper.wait()
        if procs.parent.exists():
            ci.release(procs)


def test_slower_caps_the_group_at_cores_over_the_factor_in_short_periods(tmp_path):
    ci = _helper()
    procs = ci.make_slower(1.5, cores=2, root=tmp_path, proc_cgroup=_v1(tmp_path, "/job"), name="s")
    assert procs == tmp_path / "cpu" / "job" / "s" / "cgroup.procs"
    period = int((procs.parent / "cpu.cfs_period_us").read_text())
    quota = int((procs.parent / "cpu.cfs_quota_us").read_text())
    assert period <= 20000 and quota / period == pytest.approx(2 / 1.5, rel=1e-3)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.subtree_control").write_text("cpu memory\n")
    procs = ci.make_slower(4, cores=2, root=v2, proc_cgroup="0::/\n", name="s")
    quota, period = map(int, (v2 / "s" / "cpu.max").read_text().split())
    assert quota / period == pytest.approx(0.5, rel=1e-3)
    with pytest.raises(ValueError):
        ci.make_slower(0.5, cores=2, root=v2, proc_cgroup="0::/\n", name="t")


# Two processes spin for SPIN seconds of wall time and print the CPU seconds they got together.
SPIN = 1.0
_SPINNERS = f"""
import os, time
def spin():
    end = time.monotonic() + {SPIN}
    while time.monotonic() < end:
        pass
pid = os.fork()
spin()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
t = os.times()
print(t.user + t.system + t.children_user + t.children_system)
"""


def test_on_this_machine_slower_gives_a_command_at_most_its_share_of_the_cores():
    """`slower 4` on this machine: two spinning processes get at most cores / 4 of CPU time over
    their wall time (a cap: it holds however busy the machine is), and the group is gone after."""
    ci = _helper()
    try:
        probe = ci.make_slower(4)
    except OSError:
        probe = None
    if probe is None:
        pytest.skip("no CPU cgroup can be made here (not root, or no cpu controller)")
    ci.release(probe)
    cores = len(__import__("os").sched_getaffinity(0))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_cgroup.py"), "slower", "4",
                          sys.executable, "-c", _SPINNERS], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cpu = float(out.stdout.split()[-1])
    share = min(2, cores / 4)
    assert 0 < cpu <= share * SPIN * 1.3 + 0.05, \
        f"{cpu:.2f} CPU-s in {SPIN} s for two spinners under slower 4 on {cores} core(s): the cap is {share:.2f} core(s)"
    assert not probe.parent.exists() and "slower" in out.stderr
    assert not list(probe.parent.parent.glob("labkit-slower-*")), "slower left its group behind"
