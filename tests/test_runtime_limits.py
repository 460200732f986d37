"""The runtime at its limits: what the second reliability round found, one test per fault.

Each test failed on the runtime before its fix (see the commit that added it)."""
import glob
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

import labkit
from labkit.runtime import errors, procs

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.timeout(120), pytest.mark.cluster]

MANY_FILES = r"""
import os, sys, labkit
files = [open(os.devnull) for _ in range(1100)]      # the notebook holds many files open
assert files[-1].fileno() > 1024
def fn():
    import torch, torch.distributed as dist
    t = torch.ones(1); dist.all_reduce(t); return t.item()
with labkit.Cluster(2, backend="gloo", timeout=60) as c:
    print("result", c.run(fn))
    import labkit.runtime.frames as frames
    r, w = os.pipe()
    hi = os.dup2(r, 1500)                            # frames.readable on a descriptor > 1024
    os.write(w, b"x")
    print("readable", frames.readable(hi))
"""


def test_a_notebook_with_more_than_1024_open_files_starts_a_cluster():
    p = subprocess.run([sys.executable, "-c", MANY_FILES], capture_output=True, text=True,
                       timeout=100, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "result [2.0, 2.0]" in p.stdout, p.stdout + p.stderr
    assert "readable True" in p.stdout, p.stdout + p.stderr


def _children() -> set:
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout
    return set(out.split())


def _own_dirs() -> set:
    import tempfile
    return {d for d in glob.glob(os.path.join(tempfile.gettempdir(), "labkit-*"))
            if f"-{os.getpid()}-" in os.path.basename(d)}


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_a_start_timeout_that_makes_no_sense_is_refused_first(bad):
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="start_timeout must be a positive number of seconds"):
        labkit.Cluster(2, start_timeout=bad)
    assert time.monotonic() - t0 < 2


def test_a_failed_start_leaves_nothing_behind(monkeypatch):
    """Whatever stops a start (here the rendezvous store cannot listen), it raises the runtime's
    own StartError and leaves no zygote, worker, accept thread or folder."""
    kids, dirs = _children(), _own_dirs()
    def no_store(timeout):
        raise OSError("address already in use (a test)")
    monkeypatch.setattr(procs, "rendezvous_store", no_store)
    for _ in range(3):
        with pytest.raises(errors.StartError, match="could not start: OSError: address already"):
            labkit.Cluster(2, backend="gloo")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5 and (
            _children() - kids or any(t.name == "labkit-accept" for t in threading.enumerate())):
        time.sleep(0.1)
    assert _children() - kids == set(), "processes left by failed starts"
    assert [t.name for t in threading.enumerate() if t.name == "labkit-accept"] == []
    assert _own_dirs() - dirs == set()
