"""The committed notebooks: outputs stripped, the course kernel, exercises well formed."""
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "slides").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_stripped_with_the_course_kernel(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "labkit"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs: strip them"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_every_exercise_has_a_checked_verdict(path):
    code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    exercises = sum("".join(c["source"]).count("### BEGIN SOLUTION") for c in code)
    checks = sum(1 for c in code if "nbval-check-output" in c["metadata"].get("tags", [])
                 and "labkit.check." in "".join(c["source"]))
    assert checks >= min(exercises, 1), f"{path.name}: an exercise without a labkit.check cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_nbval_markers_are_tags_not_comments(path):
    """nbval's markers live in the cells' metadata tags (`raises-exception`, `nbval-check-output`,
    ...): a cell that fails on purpose carries `raises-exception`, so JupyterLab's Run All (and
    nbconvert) go on past it as nbval does, and no `# NBVAL_...` comment shows in a cell (nbval
    warns of "overlapping options" when a cell has both)."""
    from labkit.course.exercises import _MARKER
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            found = _MARKER.findall("".join(cell["source"]))
            assert not found, f"{path.name} cell {i}: {found[0]} as a comment; make it the cell's tag"


# The learner's text of every notebook (issue 8, section 5).
REVIEWED = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
ENGINEERING = ["flock", "labkit-bench.lock", "target", "shared 2-core", "shared machine", "a 80 GB",
               "from labkit.bench", "labkit.bench import"]


@pytest.mark.parametrize("name", REVIEWED)
def test_learner_text_speaks_to_learners(name):
    """No engineers' words (targets, lock files, someone else's machine), no benchmark CLI
    internals, and checker lines end with `;` so no stray return value is printed."""
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    for i, cell in enumerate(cells):
        src = "".join(cell["source"])
        for word in ENGINEERING:
            assert word not in src, f"{name} cell {i}: {word!r}"
        if cell["cell_type"] == "code":
            for line in src.splitlines():
                if line.startswith("labkit.check."):
                    assert line.rstrip().endswith(";"), f"{name} cell {i}: end {line!r} with ';'"
