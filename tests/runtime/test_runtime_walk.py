"""The files one `cluster.run` passes through on the notebook's side (scripts/run_walk.py): the
cluster hands the task to its group of ranks once, collect never calls back into the cluster or
the group, and no file goes back to one it has left for a second errand (docs/architecture.md,
"One `run`, file by file")."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import run_walk  # noqa: E402

pytestmark = pytest.mark.cluster


def test_one_run_walks_each_file_once_and_never_back(cluster2):
    for _ in range(3):
        cluster2.run(run_walk._trivial)
    files, edges, again = run_walk.walk(run_walk.trace_one_run(cluster2))
    assert files[0] == "runtime/cluster.py" and "runtime/group.py" in edges["runtime/cluster.py"]
    assert again == [], f"returns to a file already left: {again}"
    assert "runtime/collect.py" in edges["runtime/group.py"]
    assert not any("local/" in f or "remote/" in f for f in files), \
        f"a ready run does not ask the source: {files}"
    assert len(files) <= 11, files


def test_the_walk_sees_a_callback_and_a_second_visit():
    """The tracer itself: a call up into a file on the stack and a second errand are seen."""
    calls = [("a.py", "b.py", "f", frozenset()), ("b.py", "a.py", "g", frozenset({"a.py"})),
             ("a.py", "c.py", "h", frozenset()), ("a.py", "b.py", "k", frozenset())]
    files, edges, again = run_walk.walk(calls)
    assert files == ["a.py", "b.py", "c.py"]
    assert again == [("callback", "b.py", "a.py"), ("second visit", "a.py", "b.py")]
    loop = [("a.py", "b.py", "f", frozenset()), ("a.py", "c.py", "h", frozenset()),
            ("a.py", "b.py", "f", frozenset())]
    assert run_walk.walk(loop)[2] == [], "a loop over the same functions is one visit"
