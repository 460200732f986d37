"""CPU seconds per test file, notebook and deck: where CI's time goes, measured so that a busy
machine does not blur it (wall time does). A pytest plugin, then a table:

    PYTHONPATH=$PWD:$PWD/scripts .venv/bin/python -m pytest tests notebooks build/learner \
        --nbval-lax -p cpuprof --phase parallel -n 2 --dist loadfile    # CPUPROF_OUT=folder
    python scripts/cpuprof.py /tmp/cpuprof 25

Each item's CPU is that of the whole process tree under the pytest process (itself, the children
it reaped, and every live descendant with the children they reaped: kernels, clusters, ranks),
taken before and after the item. A process that ends outside the tree (re-parented) is lost,
and so are the ranks the learner's zygote forks and the kernels the kernels' server forks
(their parents are those servers, not pytest): most of a cluster test's CPU.

CPUPROF_MODE=machine counts the whole machine's busy CPU instead (/proc/stat: user, nice,
system, irq, softirq, steal), which holds every process wherever it hangs; it is the item's own
only when nothing else runs, so use it with one worker (no -n) on a quiet machine:

    CPUPROF_MODE=machine PYTHONPATH=$PWD:$PWD/scripts .venv/bin/python -m pytest tests \
        --phase parallel -p cpuprof"""
import collections
import glob
import json
import os
import sys
import time

OUT = os.environ.get("CPUPROF_OUT", "/tmp/cpuprof")
MODE = os.environ.get("CPUPROF_MODE", "tree")


def _machine_cpu(_me=None):
    """Busy CPU-seconds of the whole machine since boot (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(me):
    import psutil
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    for p in me.children(recursive=True):
        try:
            c = p.cpu_times()
            total += c.user + c.system + c.children_user + c.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return total


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        import psutil
        me = psutil.Process()
        cpu = _machine_cpu if MODE == "machine" else _tree_cpu
        w0, c0 = time.monotonic(), cpu(me)
        yield
        w1, c1 = time.monotonic(), cpu(me)
        os.makedirs(OUT, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(OUT, f"{worker}-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps({"id": item.nodeid, "wall": w1 - w0, "cpu": c1 - c0}) + "\n")
except ImportError:
    pass


def table(folder: str, top: int = 25) -> None:
    rows = [json.loads(line) for f in glob.glob(os.path.join(folder, "*.jsonl")) for line in open(f)]
    cpu, wall, n = collections.defaultdict(float), collections.defaultdict(float), collections.Counter()
    for r in rows:
        f = r["id"].split("::")[0]
        if "test_slides.py::test_deck_runs" in r["id"]:
            f = "deck " + r["id"].split("[")[1].rstrip("]")
        cpu[f] += r["cpu"]
        wall[f] += r["wall"]
        n[f] += 1
    print(f"{len(rows)} items, CPU {sum(cpu.values()):.0f} s, wall {sum(wall.values()):.0f} s")
    print("| CPU s | wall s | items | file |\n| --- | --- | --- | --- |")
    for f, c in sorted(cpu.items(), key=lambda kv: -kv[1])[:top]:
        print(f"| {c:.1f} | {wall[f]:.1f} | {n[f]} | {f} |")


if __name__ == "__main__":
    table(sys.argv[1] if len(sys.argv) > 1 else OUT, int(sys.argv[2]) if len(sys.argv) > 2 else 25)
