"""Every exercise, in both languages: a right answer gets every point and a wrong one from the
checker's corpus loses them, through nbgrader's autograde with labkit.grading.run.Bounded.

One submission per language holds every exercise twice (the course's solution, then the
corpus's wrong answer; three times where tests/grading/test_grading.py's TUNED has an answer right for
the visible case only, which must get the visible call's share), each with its checker cell, after the cells its assignment's tests cell
needs (labkit.grading.run.plan: the imports, the cluster): one kernel and one autograde for the
whole course instead of two per exercise. The clusters are shared: an assignment's
`cluster = labkit.Cluster(world_size=N)` becomes `cluster = _shared.Cluster(world_size=N)`
(a `Cluster` call still, for the plan), which keeps the open
cluster when it has N ranks (and closes it and starts one otherwise), and the assignments come
in the order of their world sizes (4, none, 2, 8): three cluster starts per language instead
of nine. The cells are the course's own (source/ of `labkit.grading.init`), the wrong answers
those of tests/grading/test_grading.py's WRONG table.
"""
import copy
import re
import time

import nbformat
import pytest

pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[grading]'")

import labkit.grading as grading  # noqa: E402 (labkit.grading.run imports nbgrader)
from labkit.grading.run import plan  # noqa: E402
from test_grading import TUNED, WRONG, checker_of, nbg, wrong_cell  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]
REUSE = """\
class _shared:
    @staticmethod
    def Cluster(world_size):
        \"\"\"The open cluster when it has world_size ranks, else a new one (the other closed).\"\"\"
        old = globals().get("cluster")
        if old is not None and not old.closed and old.world_size == world_size:
            return old
        if old is not None:
            old.close()
        import labkit
        return labkit.Cluster(world_size=world_size)
"""
START = re.compile(r"^cluster = labkit\.Cluster\(world_size=(\d+)\)$", re.M)
ORDER = {"4": 0, None: 1, "2": 2, "8": 3}


def combined(root, lang):
    """(the combined source notebook, [(assignment, checker, right or wrong, its tests cell)])."""
    blocks, nb0 = [], None
    for src in sorted((root / "source").iterdir()):
        if src.name.endswith("_zh") != (lang == "zh"):
            continue
        nb = nbformat.read(next(src.glob("*.ipynb")), as_version=4)
        nb0 = nb0 or nb
        needs = plan(nb.cells)
        for k, (a, t) in enumerate(grading.exercises(nb)):
            setup = [copy.deepcopy(nb.cells[i]) for i in needs[t] if i != a]
            sizes = [m.group(1) for c in setup for m in START.finditer(c.source)]
            for c in setup:
                c.source = START.sub(r"cluster = _shared.Cluster(world_size=\1)", c.source)
            block = [(None, None, None, c) for c in setup]
            for kind in ("right", "wrong", "tuned") if checker_of(nb, k) in TUNED else ("right", "wrong"):
                answer, tests = copy.deepcopy(nb.cells[a]), copy.deepcopy(nb.cells[t])
                for c in (answer, tests):
                    c.metadata["nbgrader"]["grade_id"] += f"_{kind}"
                block += [(None, None, None, answer), (src.name, checker_of(nb, k), kind, tests)]
            blocks.append((ORDER[sizes[-1] if sizes else None], block))
    cells, where = [nbformat.v4.new_code_cell(REUSE)], []
    for _, block in sorted(blocks, key=lambda b: b[0]):
        for assignment, checker, kind, c in block:
            cells.append(c)
            if assignment:
                where.append((assignment, checker, kind, len(cells) - 1))
    for k, c in enumerate(cells):
        c["id"] = f"sweep-{k}"
    return nbformat.v4.new_notebook(cells=cells, metadata=nb0.metadata), where


def answer(kind: str, solution: str, checker: str) -> str:
    if kind == "wrong":
        return wrong_cell(solution, checker)
    return solution.replace(*TUNED[checker]) if kind == "tuned" else solution


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    grading.init(root)
    return root


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_exercise_right_gets_every_point_wrong_loses(course, lang):
    """Every exercise: the solution gets every point, the corpus's wrong answer fewer."""
    name = f"sweep_{lang}"
    nb, where = combined(course, lang)
    (course / "source" / name).mkdir()
    nbformat.write(nb, course / "source" / name / f"{name}.ipynb")
    nbg(course, "generate_assignment", name, "--force")
    sub = nbformat.read(course / "release" / name / f"{name}.ipynb", as_version=4)
    for _, checker, kind, t in where:                   # the answer is the cell before its tests
        sub.cells[t - 1].source = answer(kind, nb.cells[t - 1].source, checker)
    (course / "submitted" / "sweeper" / name).mkdir(parents=True)
    nbformat.write(sub, course / "submitted" / "sweeper" / name / f"{name}.ipynb")
    t0 = time.monotonic()
    nbg(course, "autograde", name, "--force", timeout=1100)
    took = time.monotonic() - t0
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        got = {g.name: g.score for g in gb.find_submission_notebook(name, name, "sweeper").grades
               if g.max_score}
    graded = nbformat.read(course / "autograded" / "sweeper" / name / f"{name}.ipynb", as_version=4)
    wrong_right = []
    for assignment, checker, kind, t in where:
        score = got[graded.cells[t].metadata["nbgrader"]["grade_id"]]
        out = "".join(o.get("text", "") + " ".join(o.get("traceback", [])) for o in graded.cells[t].get("outputs", []))
        if kind == "right" and score != grading.POINTS:
            wrong_right.append(f"{assignment}: the right answer got {score}: {out[-800:]}")
        if kind == "tuned" and score != grading.POINTS - grading.POINTS / (1 + len(grading.HIDDEN[checker])):
            wrong_right.append(f"{assignment}: the answer tuned to the visible case got {score}: {out[-800:]}")
        if kind == "wrong":
            words = WRONG[checker][2] if lang == "en" else f"{checker}: FAIL"
            if not (score < grading.POINTS and words in out and f"{checker}: FAIL" in out):
                wrong_right.append(f"{assignment}: the wrong answer got {score} (want fewer than "
                                   f"{grading.POINTS}, and {words!r} in its cell): {out[-800:]}")
    print(f"{lang}: {sum(k == 'right' for _, _, k, _ in where)} exercises, {len(where)} answers, "
          f"autograded in {took:.0f} s")
    assert not wrong_right, "\n".join(wrong_right)
