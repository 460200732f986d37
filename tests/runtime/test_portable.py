"""LABKIT_PORTABLE=1: every Linux-only piece off at once (labkit/runtime/portable.py), and the
fallbacks a Mac takes, run here for real: a process's state from `ps`, ranks that die with their
notebook without PR_SET_PDEATHSIG (the watchdog), bytes on the wire refused in words.
Each test starts its own processes with LABKIT_PORTABLE=1, so it tests the same in both CI runs.
The rest of the runtime's tests run a second time in this mode in CI (scripts/test)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from labkit.runtime import stacks

PORTABLE_ENV = dict(os.environ, LABKIT_PORTABLE="1")


def _gone(pid: int) -> bool:
    return stacks.proc_state(pid) in ("", "Z") if os.path.isdir("/proc") else \
        subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode != 0


def test_the_switch_turns_every_linux_piece_off():
    code = ("from labkit.runtime import portable, shm\n"
            "from labkit.runtime.local import zygote, watchdog\n"
            "from labkit.comm import traffic\n"
            "print(sorted(k for k, v in portable.pieces().items() if v), shm.ENABLED, "
            "zygote.ENABLED, watchdog.NEEDED, bool(traffic.unavailable_reason()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=PORTABLE_ENV, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "False", "False", "True", "True"], out.stdout


def test_process_state_from_ps_matches_proc():
    p = subprocess.Popen(["sleep", "30"])
    try:
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while stacks._ps_state(p.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert stacks._ps_state(p.pid) == "T"
        if os.path.isdir(f"/proc/{p.pid}"):
            assert stacks.proc_state(p.pid) == "T"   # Linux's own answer agrees
        os.kill(p.pid, signal.SIGCONT)
        assert stacks._ps_state(p.pid) in ("S", "R")
    finally:
        p.kill()
        p.wait()
    assert stacks._ps_state(p.pid) == ""             # gone


NOTEBOOK = """
import os, signal, sys, labkit
from labkit.runtime.local import watchdog
c = labkit.Cluster(2, spares=0)
pids = c.run(lambda: os.getpid())
def wire_bytes():
    from labkit.comm import traffic
    with traffic.measure():
        pass
try:
    c.run(wire_bytes)
except labkit.RankError as exc:
    print("TRAFFIC", " ".join(str(exc).split()), flush=True)
os.kill(pids[1], signal.SIGSTOP)        # a rank none of whose own threads can run
print("PIDS", *pids, watchdog.pid(), flush=True)
signal.pause()
"""


@pytest.mark.cluster
def test_ranks_die_with_their_notebook_without_pdeathsig():
    """The notebook is SIGKILLed (no atexit, no close) while rank 1 is stopped: the stopped rank
    cannot notice by itself, so only something outside it (PR_SET_PDEATHSIG on Linux, the
    watchdog here) can end it. Both ranks and the watchdog are gone within 5 s."""
    nb = subprocess.Popen([sys.executable, "-c", NOTEBOOK], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=PORTABLE_ENV)
    try:
        said = nb.stdout.readline()                 # a Mac cannot count bytes: it says so
        assert "TrafficUnavailable: bytes on the wire are not measured on this system" in said, said
        assert "LABKIT_PORTABLE=1 is set" in said and "run this notebook on Linux" in said, said
        line = nb.stdout.readline()
        assert line.startswith("PIDS"), line
        ranks, dog = [int(w) for w in line.split()[1:3]], line.split()[3]
        assert dog != "None", "LABKIT_PORTABLE=1 started no watchdog"
        stopped = time.monotonic() + 5             # SIGSTOP lands asynchronously: wait for it
        while stacks._ps_state(ranks[1]) != "T" and time.monotonic() < stopped:
            time.sleep(0.02)
        assert stacks._ps_state(ranks[1]) == "T"
    finally:
        nb.kill()
        nb.wait()
    t0 = time.monotonic()
    while not all(_gone(p) for p in ranks + [int(dog)]) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    left = [p for p in ranks + [int(dog)] if not _gone(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"still running 5 s after the notebook was killed: {left} (ranks {ranks})"
