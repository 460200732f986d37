"""CI's two phases (root conftest.py): every item runs in exactly one of them; a file in SERIAL
and a single test marked `serial` run alone, everything else with the bulk. Pure: no process."""
import importlib.util
import json
import pathlib
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _root_conftest():
    spec = importlib.util.spec_from_file_location("labkit_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Item:
    def __init__(self, nodeid, marked=False, path=None):
        self.nodeid = nodeid
        self.path = path or ROOT / nodeid.split("::")[0]
        self._marked = marked

    def get_closest_marker(self, name):
        return pytest.mark.serial.mark if (self._marked and name == "serial") else None


def _config(phase, deselected):
    hook = types.SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))
    return types.SimpleNamespace(getoption=lambda name: phase, hook=hook)


def test_each_item_runs_in_exactly_one_phase():
    conftest = _root_conftest()
    serial_file = sorted(conftest.SERIAL)[0]
    items = [_Item(f"tests/{serial_file}::test_a"),                         # the whole file is serial
             _Item("tests/ddp/test_ddp.py::test_overlap", marked=True),         # one marked test
             _Item("tests/ddp/test_ddp.py::test_parity[2ranks]"),               # the rest of its file
             _Item("notebooks/00_cluster.ipynb::Cell 0")]
    ran = {}
    for phase in ("parallel", "serial"):
        kept, dropped = list(items), []
        conftest.pytest_collection_modifyitems(_config(phase, dropped), kept)
        ran[phase] = [i.nodeid for i in kept]
        assert sorted(ran[phase] + [i.nodeid for i in dropped]) == sorted(i.nodeid for i in items)
    assert ran["serial"] == [f"tests/{serial_file}::test_a", "tests/ddp/test_ddp.py::test_overlap"]
    assert sorted(ran["parallel"]) == ["notebooks/00_cluster.ipynb::Cell 0",   # in the table's order
                                       "tests/ddp/test_ddp.py::test_parity[2ranks]"]
    everything = list(items)
    conftest.pytest_collection_modifyitems(_config("all", []), everything)
    assert everything == items


def test_the_serial_phase_skips_only_files_that_never_say_serial(tmp_path):
    """The serial phase does not import a test file that is not in SERIAL and never says
    `serial` (collection: about 5 CPU-s for every module, 2 for those it needs); a file that
    says it, or is in SERIAL, is collected, and so is anything in the other phases."""
    conftest = _root_conftest()
    plain = tmp_path / "test_plain.py"
    plain.write_text("def test_a():\n    pass\n")
    marked = tmp_path / "test_marked.py"
    marked.write_text("import pytest\n\n\n@pytest.mark.serial\ndef test_a():\n    pass\n")
    listed = tmp_path / sorted(conftest.SERIAL)[0]
    listed.write_text("def test_a():\n    pass\n")
    helper = tmp_path / "helpers.py"
    helper.write_text("X = 1\n")
    ignored = {p.name: conftest.pytest_ignore_collect(p, _config("serial", [])) for p in (plain, marked, listed, helper)}
    assert ignored == {"test_plain.py": True, "test_marked.py": None, listed.name: None, "helpers.py": None}
    for phase in ("parallel", "all"):
        assert conftest.pytest_ignore_collect(plain, _config(phase, [])) is None


def test_a_serial_test_in_a_file_the_serial_phase_skips_stops_the_run(tmp_path):
    """A test marked `serial` from outside its file (a marker kept in a helper module): the
    serial phase would skip the file and the parallel one deselect the test, so it would never
    run; collection stops with what to do instead."""
    conftest = _root_conftest()
    hidden = tmp_path / "test_hidden.py"
    hidden.write_text("from helpers import MARK\n\n\n@MARK\ndef test_a():\n    pass\n")
    for phase in ("parallel", "serial"):
        items = [_Item("tests/repo/test_hidden.py::test_a", marked=True, path=hidden)]
        with pytest.raises(pytest.UsageError, match="say `serial` in the file"):
            conftest.pytest_collection_modifyitems(_config(phase, []), items)


def test_every_serial_file_is_one_test_file_under_tests():
    """SERIAL names files, not paths (tests/ has a folder per part of labkit): each name must be
    a test file somewhere under tests/, once, or its tests would silently run with the bulk."""
    serial = _root_conftest().SERIAL
    found = {name: sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob(name)) for name in serial}
    assert {name: paths for name, paths in found.items() if len(paths) != 1} == {}


def test_the_serial_marker_is_declared():
    """pytest warns of (and --strict-markers refuses) a marker pyproject.toml does not declare."""
    text = (ROOT / "pyproject.toml").read_text()
    assert '"serial: ' in text


def test_a_learner_copy_runs_only_where_it_differs_from_its_notebook():
    # A learner copy of a notebook with no exercise is that notebook again: nbval runs it once.
    from labkit.course.exercises import BEGIN
    ignore = _root_conftest().pytest_ignore_collect
    with_exercise = [p.name for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                     if BEGIN in p.read_text(encoding="utf-8")]
    without = [p.name for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if p.name not in with_exercise]
    assert with_exercise and without
    for name in with_exercise:
        for folder in ("learner", "learner-zh"):
            assert ignore(ROOT / "build" / folder / name, None) is None, name
    for name in without:
        assert ignore(ROOT / "build" / "learner" / name, None) is True, name
        assert ignore(ROOT / "notebooks" / name, None) is None, name


# -- the parallel phase's order: the files that took longest first, so both workers end together --
def _items(*nodeids):
    return [types.SimpleNamespace(nodeid=n) for n in nodeids]


def test_longest_files_first_each_file_together_and_in_order():
    order = _root_conftest().by_file_seconds
    items = _items("a.py::t1", "b.py::t1", "a.py::t2", "c.ipynb::Cell 0", "c.ipynb::Cell 1", "d.py::t",
                   "e.py::t")
    got = [i.nodeid for i in order(items, {"a.py": 1.0, "b.py": 9.0, "c.ipynb": 30.0, "e.py": 9.0})]
    # c first; then b and e (9 s each, in their order); d unknown: the median, 9 s, after them; a last
    assert got == ["c.ipynb::Cell 0", "c.ipynb::Cell 1", "b.py::t1", "d.py::t", "e.py::t",
                   "a.py::t1", "a.py::t2"], got
    assert [i.nodeid for i in order(items, {})] == [i.nodeid for i in sorted(
        items, key=lambda i: ("a.py", "b.py", "c.ipynb", "d.py", "e.py").index(i.nodeid.split("::")[0]))]


def test_the_table_names_files_that_exist_and_scripts_test_keeps_the_order():
    table = json.loads((ROOT / "tests" / "file_seconds.json").read_text(encoding="utf-8"))
    learner = ("build/learner/", "build/learner-zh/")
    gone = [f for f in table if not (ROOT / f).exists() and not (
        f.startswith(learner) and (ROOT / "notebooks" / pathlib.Path(f).name).exists())]
    assert not gone, (f"tests/file_seconds.json names files that are gone: {gone}; copy a whole run's "
                      "build/file-seconds.json over it")
    assert len(table) >= 100 and max(table.values()) > 60
    text = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    assert "--no-loadscope-reorder" in text, "without it pytest-xdist orders files by their number of items"
