"""Has the code a process imported changed on disk? (labkit/runtime/local/stamps.py: what tells
the learner's zygote to make way for a fresh one.) No processes: a module of the test's own."""
import importlib
import os
import sys
import time

import pytest

from labkit.runtime.local import stamps


@pytest.fixture(params=["inotify", "stamps"])
def module(request, tmp_path, monkeypatch):
    """A module imported from tmp_path, watched by inotify or (the fallback) by its files' stamps."""
    if request.param == "stamps":
        def refused(self):
            raise OSError("inotify refused (the test's fallback)")
        monkeypatch.setattr(stamps.Watch, "_start_inotify", refused)
    name = f"lkt_watched_{os.getpid()}_{time.monotonic_ns()}"
    path = tmp_path / f"{name}.py"
    path.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(name)
    yield path, request.param
    sys.modules.pop(name, None)


def test_an_edit_a_touch_or_a_new_package_is_a_change_and_bytecode_is_not(module):
    path, how = module
    w = stamps.Watch()
    if how == "inotify" and w.fd is None:
        w.close()
        pytest.skip("no inotify here (Linux only): the stamps are compared instead")
    try:
        assert (w.fd is not None) == (how == "inotify")
        assert w.changed() == ""
        cache = path.parent / "__pycache__"                     # python writing bytecode
        cache.mkdir(exist_ok=True)
        (cache / "x.cpython.pyc").write_bytes(b"\0" * 16)
        (path.parent / "notes.txt").write_text("not code")
        assert w.changed() == ""
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))   # a touch: same text
        assert w.changed() == str(path)
        assert w.changed() == str(path)                          # said again, not forgotten
    finally:
        w.close()
    w = stamps.Watch()
    try:
        path.write_text("VALUE = 2\n")                           # an edit
        assert w.changed() == str(path)
    finally:
        w.close()
    if how == "inotify":                                         # a package installed beside it
        w = stamps.Watch()
        try:
            (path.parent / "newpkg-1.0.dist-info").mkdir()
            assert w.changed().endswith("newpkg-1.0.dist-info")
        finally:
            w.close()


def test_a_file_changed_while_importing_counts_as_changed(module):
    path, _ = module
    since = time.time_ns()
    time.sleep(0.02)
    path.write_text("VALUE = 3\n")                               # after the import had begun
    w = stamps.Watch(since)
    try:
        assert w.changed() == str(path)
    finally:
        w.close()
