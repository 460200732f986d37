"""Shared fixtures: long-lived clusters, so each test file does not pay a cold start.

`cluster2` and `cluster4` are gloo clusters of 2 and 4 ranks shared by the whole session;
`cluster1` and `cluster3` live for one test module (few modules need them). None has spares:
a test that breaks one gets fresh ranks through a cold start. Tests that deliberately crash
or hang ranks make their own Cluster.
"""
import signal

import pytest

import labkit

# A pytest started in the background by a non-interactive shell (scripts/test runs the portable
# pass that way) inherits SIGINT ignored, so Python installs no KeyboardInterrupt handler and the
# tests that press Ctrl-C (os.kill(pid, SIGINT)) would see nothing. A notebook's kernel has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _shared(n: int):
    with labkit.Cluster(n, backend="gloo", spares=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def cluster1():
    yield from _shared(1)


@pytest.fixture(scope="session")
def cluster2():
    yield from _shared(2)


@pytest.fixture(scope="module")
def cluster3():
    yield from _shared(3)


@pytest.fixture(scope="session")
def cluster4():
    yield from _shared(4)


@pytest.fixture
def zh(monkeypatch):
    """LABKIT_LANG=zh for one test: what labkit prints comes out in Chinese (the tests of the
    Chinese edition ask for it by name)."""
    monkeypatch.setenv("LABKIT_LANG", "zh")


@pytest.fixture(params=[2, 4], ids=["2ranks", "4ranks"])
def cluster(request):
    """Parametrises a test over the shared 2- and 4-rank clusters."""
    return request.getfixturevalue(f"cluster{request.param}")


# --- markers -------------------------------------------------------------------------------
# `pytest -m "not cluster"` runs the tests that start no process (formulas, schedules, the
# planner, pictures from recorded data) in seconds. A test is marked `cluster` when it uses a
# cluster fixture or its own source starts ranks or processes; notebooks (nbval) are marked too.
import functools
import inspect

_CLUSTER_FIXTURES = {"cluster", "cluster1", "cluster2", "cluster3", "cluster4"}
_PROCESS_WORDS = ("Cluster(", "getfixturevalue", "Popen", "examples/", "torchrun", "jupyter_client", "KernelManager")


@functools.cache
def _sources(fn, module, depth=2):
    """The source of `fn` and of the test module's functions it calls, `depth` calls deep
    (once per function: a parametrised test and a shared fixture are asked for again and again,
    and inspect.getsource scans the file each time; callers only read the list)."""
    try:
        out = [inspect.getsource(fn)]
    except (OSError, TypeError):
        return ["Cluster("]                       # unknown: assume it starts processes
    if depth:
        for name in getattr(getattr(fn, "__code__", None), "co_names", ()):
            f = getattr(module, name, None)
            if inspect.isfunction(f) and f.__module__ == module.__name__:
                out += _sources(f, module, depth - 1)
    return out


def _starts_processes(item) -> bool:
    if any(name in _CLUSTER_FIXTURES or "cluster" in name for name in getattr(item, "fixturenames", ())):
        return True
    fn, module = getattr(item, "function", None), getattr(item, "module", None)
    if fn is None or module is None:                # nbval cells, notebook items
        return True
    funcs = [fn] + [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
    return any(w in src for f in funcs for src in _sources(f, module) for w in _PROCESS_WORDS)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _starts_processes(item):
            item.add_marker(pytest.mark.cluster)
        if item.nodeid.split("::")[0].endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)
    _deselect_browser(config, items)


# --- browser tests -------------------------------------------------------------------------
# Without chromium or playwright the `browser` tests are deselected, and ONE line says so.
_browser_off = []


def _browser_missing() -> str:
    import sys, pathlib
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from support.browser_helpers import ENABLE, missing
    why = missing()
    return f"{why}; {ENABLE}" if why else ""


def _deselect_browser(config, items):
    browser = [i for i in items if i.get_closest_marker("browser")]
    why = _browser_missing() if browser else ""
    if why:
        _browser_off.append((len(browser), why))
        config.hook.pytest_deselected(items=browser)
        items[:] = [i for i in items if not i.get_closest_marker("browser")]


# --- time per part of the run (CI's table: tests, notebooks, learner copies, decks, browser) ---
_part_seconds = {}


def _part(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    if path.startswith("build/learner"):
        return "learner copies"
    if path.startswith("notebooks/"):
        return "notebooks"
    if "test_browser" in path:
        return "browser"
    if "test_slides" in path or "test_i18n_deck" in path:      # decks (the Chinese one too)
        return "decks"
    return "tests"


_file_seconds = {}


def _count_reports(terminalreporter) -> None:
    """Sum each test's setup, call and teardown by part and by file. From the terminal reporter's
    records, not pytest_runtest_logreport: a conftest in tests/ is not asked about notebooks/ items."""
    seen = set()
    for reports in terminalreporter.stats.values():
        for r in reports:
            if getattr(r, "when", None) and hasattr(r, "duration") and id(r) not in seen:
                seen.add(id(r))
                part = _part(r.nodeid)
                _part_seconds[part] = _part_seconds.get(part, 0.0) + r.duration
                path = r.nodeid.split("::")[0]
                _file_seconds[path] = _file_seconds.get(path, 0.0) + r.duration


def pytest_terminal_summary(terminalreporter):
    for n, why in _browser_off:
        terminalreporter.write_line(f"{n} browser tests not run: {why}")
    _count_reports(terminalreporter)
    import sys
    deck_build = sys.modules.get("support.deck_build")
    for part, seconds in (deck_build.spent.items() if deck_build else ()):
        _part_seconds[part] -= seconds            # building (executing) the decks counts as "decks"
        _part_seconds["decks"] = _part_seconds.get("decks", 0.0) + seconds
    if _part_seconds:
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(_part_seconds.items(), key=lambda kv: -kv[1]))
        terminalreporter.write_line(f"time per part: {parts}")
    out = terminalreporter.config.getoption("--file-seconds-out")
    if out and _file_seconds and terminalreporter.config.getoption("--phase") == "parallel":
        import json                              # the parallel phase's order (conftest.py at the root)
        table = {k: round(v, 1) for k, v in sorted(_file_seconds.items(), key=lambda kv: (-kv[1], kv[0]))}
        with open(out, "w", encoding="utf-8") as f:
            json.dump(table, f, indent=0)
            f.write("\n")
        terminalreporter.write_line(f"seconds per file: {out} ({len(table)} files)")
