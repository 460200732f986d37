"""Verdicts fail CI: a notebook cell (nbval) whose output says FAIL or MISS fails its test.

The notebooks are committed without outputs, so nbval compares nothing, and checkers print
rather than raise (a learner reads a line, not a traceback). Here, after each notebook cell ran,
its outputs are read: a checker's ``name: FAIL (...)`` or a ``MISS: ...`` verdict fails the cell
(vocabulary in `labkit.verdict`). A cell that shows a FAIL on purpose carries the metadata tag
``expect-fail`` and fails when it shows none. A stub's "not implemented yet" passes.

This file sits at the repository's root so that it applies to notebooks/ and build/learner as
well as tests/ (pytest asks a conftest only about the items under its own folder).

It also splits CI into two phases (`scripts/test`): `--phase parallel` runs every item except
the SERIAL files on pytest-xdist workers (`--dist loadfile`: each notebook and each test file
runs in order on one worker; tests/support/deck_build.py locks each deck, so the two files that use the
built decks execute each deck once between them); `--phase serial` runs the SERIAL files on their own, because they
assert wall-clock times (a recovery within 1 s, a round trip against a pipe, a pipeline's
bubble) that a second worker of the same weight beside them would blur (scripts/test runs them
beside the parallel phase only where that phase can be given a twentieth of their CPU weight,
scripts/ci_cgroup.py; else after it, alone). A test that asserts a time in a file
that mostly does not carries the marker `serial` instead (it alone runs in the serial phase, the
rest of its file with the bulk). The serial phase does not import a test file that is neither
in SERIAL nor says `serial` anywhere (`_no_serial_item`); a test marked from elsewhere stops the
collection. The default, `--phase all`, runs everything, as a plain `pytest` does.

In the parallel phase the files run longest first (`by_file_seconds`, from the seconds each file
took in a CI run: tests/file_seconds.json), so that the last files to start are short ones and
both workers end together; scripts/test passes `--no-loadscope-reorder`, without which
pytest-xdist hands out the files with the most items first (the hub's and the grading's single
long tests came last, and one core idled for the last two minutes or so). scripts/test's parallel
phase writes the seconds of its own run to build/file-seconds.json (`--file-seconds-out`): copy it
over tests/file_seconds.json to refresh the table. A stale table only costs time, never a test.

Every Jupyter kernel a test process starts (nbval's, the tests' own) gets its five ports from
below the ephemeral range (`pytest_configure`, labkit/runtime/ports.py): jupyter_client binds
port 0, frees it and lets the kernel bind it later, and in CI an outgoing connection took one
meanwhile (the kernel died: "Address already in use").
"""
import functools
import json
import os
import pathlib
import statistics

import pytest

from labkit.course.exercises import BEGIN as BEGIN_SOLUTION
from labkit.verdict import EXPECT_FAIL_TAG, failing_lines, measured_lines

# Cells that show a FAIL on purpose in notebooks this change could not edit, until they carry
# the tag: notebook -> a piece of that cell's source. A listed cell that has the tag fails (so
# the entry goes once the tag is there).
UNTAGGED_EXPECT_FAIL = {}


SERIAL = {                                  # test files that assert times: run alone (see above)
    "test_runtime_failures.py", "test_runtime_io.py",
    "test_runtime_speed.py", "test_check_guard.py", "test_zero_check.py", "test_moe_check.py", "test_cp_check.py",
    "test_browser_lab.py",
}       # and single tests marked `serial` (test_ddp, test_runtime, test_runtime_data, test_runtime_process,
        #   test_pipeline_run, test_runtime_remote)


FILE_SECONDS = pathlib.Path(__file__).parent / "tests" / "file_seconds.json"


def pytest_addoption(parser):
    parser.addoption("--phase", default="all", choices=("all", "parallel", "serial"),
                     help="labkit's CI phases: 'parallel' runs all but the tests that assert times "
                          "(conftest.SERIAL), 'serial' only those; 'all' (default) everything")
    parser.addoption("--file-seconds-out", default=None, metavar="PATH",
                     help="write the seconds each test file or notebook took (setup, call and "
                          "teardown of its items) to PATH as JSON: the table the parallel phase "
                          "orders its files by (tests/file_seconds.json)")


def _file(item) -> str:
    return item.nodeid.split("::")[0]


def _serial(item) -> bool:
    return pathlib.Path(_file(item)).name in SERIAL or item.get_closest_marker("serial") is not None


def pytest_ignore_collect(collection_path, config):
    """A learner copy (build/learner*/NN.ipynb) of a notebook with no exercise is the reference
    notebook itself, cell for cell (in Chinese: the same code, its text translated): nbval runs
    the reference once, not its copy again."""
    p = pathlib.Path(collection_path)
    if p.suffix == ".ipynb" and p.parent.name.startswith("learner") and p.parent.parent.name == "build":
        ref = pathlib.Path(__file__).parent / "notebooks" / p.name
        if ref.exists() and BEGIN_SOLUTION not in ref.read_text(encoding="utf-8"):
            return True
    if p.suffix == ".py" and config.getoption("--phase") == "serial" and _no_serial_item(p):
        return True
    return None


@functools.cache
def _no_serial_item(p: pathlib.Path) -> bool:
    """A test file that holds no item of the serial phase: not in SERIAL, and its source never
    says `serial` (the marker can come from nowhere else: no conftest adds it). The serial phase
    does not import it (collecting every test module costs about 5 CPU-s, for the 20 files that
    have such items). Read once per file: collection asks again for each of its serial items."""
    if p.suffix != ".py" or not p.name.startswith("test_") or p.name in SERIAL:
        return False
    try:
        return "serial" not in p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def by_file_seconds(items: list, seconds: dict) -> list:
    """`items` with the files that took longest first (`seconds`: file -> seconds; a file not in
    it counts as the median file), each file's items together and in their order, files of
    equal seconds in their order of collection."""
    default = statistics.median(seconds.values()) if seconds else 0.0
    first = {}
    for i, item in enumerate(items):
        first.setdefault(_file(item), i)
    return sorted(items, key=lambda item: (-seconds.get(_file(item), default), first[_file(item)]))


def _file_seconds() -> dict:
    try:
        return json.loads(FILE_SECONDS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def pytest_configure(config):
    """jupyter_client's LocalPortCache picks each kernel port with bind(("", 0)): a port of the
    ephemeral range, which any outgoing connection may take before the kernel binds it. Here it
    picks from below that range instead (labkit.runtime.ports.jupyter_kernel_ports)."""
    from labkit.runtime.ports import jupyter_kernel_ports
    jupyter_kernel_ports()


def pytest_collection_finish(session):
    """The collected session (torch, the test modules, two thousand items) into the collector's
    permanent generation (gc.freeze): a test process's full collections then walk only what the
    tests made since, not the whole heap again and again (about 0.3 s each once torch is in,
    and more as the heap grows). Nothing collected is kept that a collection would have freed:
    the cycles go first (gc.collect), and what is frozen stays alive as it was."""
    import gc
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)              # after tests/conftest.py's markers and deselections
def pytest_collection_modifyitems(config, items):
    phase = config.getoption("--phase")
    if phase == "all":
        return
    keep, drop, unseen = [], [], []
    for item in items:
        serial = _serial(item)
        (keep if serial == (phase == "serial") else drop).append(item)
        if serial and _no_serial_item(pathlib.Path(item.path)):
            unseen.append(item.nodeid)
    if unseen:                              # (the serial phase would not collect them: never run)
        raise pytest.UsageError(
            f"{len(unseen)} test(s) of the serial phase in files it does not collect, such as "
            f"{unseen[0]}: say `serial` in the file (the marker) or name the file in conftest.SERIAL")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if phase == "parallel":
        items[:] = by_file_seconds(items, _file_seconds())


def _text(outputs) -> str:
    parts = []
    for out in outputs or ():
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "\n".join(parts)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    cell, outputs = getattr(item, "cell", None), getattr(item, "test_outputs", None)
    if cell is None or outputs is None:                 # not an nbval cell
        return result
    text = _text(outputs)
    _record_measured(item, text)
    bad = failing_lines(text)
    expected = EXPECT_FAIL_TAG in cell.get("metadata", {}).get("tags", [])
    listed = UNTAGGED_EXPECT_FAIL.get(item.path.name)
    if listed and listed in cell.source:
        if expected:
            _fail(item, f"this cell has the {EXPECT_FAIL_TAG!r} tag now: take {item.path.name} out "
                        "of UNTAGGED_EXPECT_FAIL in conftest.py")
        expected = True
    if bad and not expected:
        _fail(item, "the cell printed a failing verdict:\n" + "\n".join(bad))
    if expected and not bad:
        _fail(item, f"the cell is tagged {EXPECT_FAIL_TAG!r} but printed no FAIL or MISS line")
    return result


MEASURED = pathlib.Path(os.environ.get("LABKIT_MEASURED_VERDICTS")
                        or pathlib.Path(__file__).parent / "build" / "measured-verdicts.txt")


def _record_measured(item, text: str) -> None:
    """Every ``ok:``/``MISS:`` line a notebook cell printed (a measurement against its formula,
    with both numbers and the tolerance), appended to build/measured-verdicts.txt with the
    notebook and the cell (LABKIT_MEASURED_VERDICTS: another file): after a run, how close each
    measurement came to its tolerance."""
    lines = measured_lines(text)
    if not lines:
        return
    where = f"{item.path.parent.name}/{item.path.name} {item.name.split('::')[-1]}"
    try:
        MEASURED.parent.mkdir(exist_ok=True)
        with open(MEASURED, "a", encoding="utf-8") as f:         # (one write: workers append whole lines)
            f.write("".join(f"{where}\t{ln}\n" for ln in lines))
    except OSError:
        pass


def _fail(item, message: str):
    """Fail the cell the way nbval reports a cell (its number and source under the message)."""
    if hasattr(item, "raise_cell_error"):
        item.raise_cell_error(message)
    pytest.fail(message, pytrace=False)
