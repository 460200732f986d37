"""Autograding in bounded time (labkit.grading.run): which cells a tests cell needs, read from
the code; and nbgrader's autograde with `Bounded` on a small course of plain Python exercises
(no cluster, a plain python3 kernel), where one learner's answers hang (SIGINT ignored) and
crash the kernel and another's run out of the submission's time: each loses the points of the
exercises it broke (or did not reach in time) and no others, and a cell no tests cell needs is
never run."""
import os
import pathlib
import subprocess
import sys
import time

import nbformat
import pytest

nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[grading]'")

import labkit.grading as grading  # noqa: E402 (labkit.grading.run imports nbgrader)
from labkit.grading.run import CLUSTER, names, plan  # noqa: E402
pytestmark = pytest.mark.timeout(400)


def test_names_follow_pythons_scopes():
    assert names("def f(t):\n    t = t.clone()\n    dist.all_reduce(t)\n    return t / labkit.n\n") \
        == ({"f"}, {"dist", "labkit"}, False)          # t is f's own
    assert names("x = x + 1")[:2] == ({"x"}, {"x"})     # an earlier cell's x
    assert names("import torch.distributed as dist\nfrom a import b as c")[0] == {"dist", "c"}
    assert names("[i * k for i in range(n)]")[1] == {"range", "k", "n"}
    assert names("class A(B):\n    y = 1\n    def m(self):\n        return y\n")[1] == {"B", "y"}
    assert names("def g():\n    global G\n    G = 1\n")[0] == {"g", "G"}
    assert names("f = lambda a, b=d: a + e")[:2] == ({"f"}, {"d", "e"})
    assert CLUSTER in names("cluster = labkit.Cluster(world_size=4)")[0]
    assert CLUSTER not in names("with labkit.Cluster(world_size=2) as two:\n    two.run(f)\n")[0]
    assert CLUSTER in names("labkit.check.mean_over_ranks(mean_over_ranks);")[1]
    assert names("import labkit; labkit.set_lang('zh')")[2] is True
    assert names("%%ranks\nx = 1\n")[0] == set()               # rank-side: defines nothing here
    assert names("def broken(:\n")[:2] == (set(), set())      # a syntax error runs nothing


def cell(source, kind=None, k=0, points=1):
    c = nbformat.v4.new_code_cell(source)
    if kind:
        c.metadata["nbgrader"] = grading._meta(kind, f"{kind}_{k}", points if kind == "tests" else None)
    return c


ANSWER = "def {f}():\n    ### BEGIN SOLUTION\n    return {v}\n    ### END SOLUTION\n"
EXERCISES = ["one", "two", "three", "four"]


def course_notebook():
    cells = [cell("import os, signal, time\nSTARTED = time.time()"),
             cell("never = time.sleep(600)   # a demo no tests cell needs")]
    for k, f in enumerate(EXERCISES):
        cells += [cell(ANSWER.format(f=f, v=k + 1), "answer", k),
                  cell(f"assert {f}() == {k + 1}", "tests", k)]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def test_the_plan_of_the_small_course():
    nb = course_notebook()
    assert plan(nb.cells) == {3: [2], 5: [4], 7: [6], 9: [8]}
    nb.cells[2].source = "def one():\n    return int(os.environ['ONE'])\n"   # a learner's: needs cell 0
    nb.cells.insert(4, cell("def helper():\n    return 2\n"))               # and their own helper
    nb.cells[5].source = "def two():\n    return helper()\n"
    assert plan(nb.cells) == {3: [0, 2], 6: [4, 5], 8: [7], 10: [9]}


def nbg(root, *args, timeout=300):
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    r = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"nbgrader {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def cell_grades(root, student):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root}/gradebook.db") as gb:
        nb = gb.find_submission_notebook("small", "small", student)
        return {g.name: g.score for g in nb.grades if g.name.startswith("tests")}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = grading.write_config(tmp_path_factory.mktemp("small-course"))
    cfg = root / "nbgrader_config.py"
    cfg.write_text(cfg.read_text() + "c.Execute.timeout = 10\n")   # hangs found sooner
    (root / "source" / "small").mkdir(parents=True)
    nbformat.write(course_notebook(), root / "source" / "small" / "small.ipynb")
    nbg(root, "generate_assignment", "small", "--force")
    release = nbformat.read(root / "release" / "small" / "small.ipynb", as_version=4)
    answers = {f: ANSWER.format(f=f, v=k + 1) for k, f in enumerate(EXERCISES)}
    broken = {**answers,
              # a hang deaf to the interrupt (a blocked wait, as a deadlock is: no core spun for
              # the cell's 10 s), so only the kill ends it
              "one": answers["one"] + "signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)\n",
              "three": answers["three"] + "os.kill(os.getpid(), 9)\n"}
    slow = {f: "time.sleep(8)\n" + a for f, a in answers.items()}     # each within the cell's 10 s
    for student, sources in {"right": answers, "broken": broken}.items():
        nb = nbformat.from_dict(release)
        for k, f in enumerate(EXERCISES):
            nb.cells[2 + 2 * k].source = sources[f]
        (root / "submitted" / student / "small").mkdir(parents=True)
        nbformat.write(nb, root / "submitted" / student / "small" / "small.ipynb")
    took = {}
    t0 = time.monotonic()
    nbg(root, "autograde", "small")
    took["right and broken"] = time.monotonic() - t0
    nb = nbformat.from_dict(release)
    for k, f in enumerate(EXERCISES):
        nb.cells[2 + 2 * k].source = slow[f]
    (root / "submitted" / "slow" / "small").mkdir(parents=True)
    nbformat.write(nb, root / "submitted" / "slow" / "small" / "small.ipynb")
    t0 = time.monotonic()
    nbg(root, "autograde", "small", "--student", "slow", "--Bounded.submission_timeout=20")
    took["slow"] = time.monotonic() - t0
    return root, took


def autograded(root, student):
    return nbformat.read(root / "autograded" / student / "small" / "small.ipynb", as_version=4)


def errors(c):
    return [o.get("ename") for o in c.get("outputs", []) if o.get("output_type") == "error"]


def test_right_answers_get_every_point_and_unneeded_cells_never_run(graded):
    root, took = graded
    assert cell_grades(root, "right") == {f"tests_{k}": 1.0 for k in range(4)}
    nb = autograded(root, "right")
    assert nb.cells[1].get("outputs") == [] and nb.cells[1].get("execution_count") is None


def test_a_hang_and_a_crash_cost_their_exercises_only(graded):
    root, took = graded
    assert cell_grades(root, "broken") == {"tests_0": 0.0, "tests_1": 1.0, "tests_2": 0.0, "tests_3": 1.0}
    nb = autograded(root, "broken")
    assert "CellTimeoutError" in errors(nb.cells[2]), nb.cells[2].outputs     # the hang, interrupted
    assert "NotGraded" in errors(nb.cells[3]), nb.cells[3].outputs
    assert "KernelDied" in errors(nb.cells[6]), nb.cells[6].outputs
    assert "NotGraded" in errors(nb.cells[7]), nb.cells[7].outputs
    print(f"autograde (seconds): {took}")


def test_the_submissions_time_runs_out_and_nothing_after_gets_points(graded):
    root, took = graded
    got = cell_grades(root, "slow")
    nb = autograded(root, "slow")
    late = ["NotGraded" in errors(nb.cells[3 + 2 * k]) for k in range(4)]
    # 4 x 8 s of answers against 20 s: the first ones may run and get their point (how many
    # depends on the machine); from the first not run on, none runs, and none gets a point
    assert late[-1] and late == sorted(late), [nb.cells[3 + 2 * k].outputs for k in range(4)]
    assert all(got[f"tests_{k}"] == (0.0 if late[k] else 1.0) for k in range(4)), (got, late)
    print(f"the slow submission: {took['slow']:.0f} s with nbgrader's start, for a budget of 20 s")
