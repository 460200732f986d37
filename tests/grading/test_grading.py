"""The course as an nbgrader course (labkit.grading): built, released with `nbgrader
generate_assignment`, and autograded for a right answer (every point) and a wrong one from the
checker's corpus (fewer points), in English and in Chinese; the release is the learner copy of
`scripts/lab`, cell for cell. Without nbgrader (the extra `grading`) it is skipped.

An autograde starts a kernel and a cluster per submission (about 40 s a submission here), so CI
autogrades one assignment here (CI_ASSIGNMENTS) and checks the release of three
(RELEASE_CHECKED); every exercise's right, wrong and tuned answers (TUNED: right for the visible
case only), in both languages, are graded in CI by tests/grading/test_grading_sweep.py, one submission
per language. LABKIT_GRADING_ALL=1 autogrades every assignment in both languages here, one by
one (some 40 minutes here, estimated: 48 submissions at about 50 s)."""
import json
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest

import labkit.grading as grading
from labkit import exercises, verdict

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
nbgrader = pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[grading]'")
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
ALL = os.environ.get("LABKIT_GRADING_ALL") == "1"

# a wrong answer per exercise, from the checkers' corpora (not their stubs, WRONG[0]): (file,
# expression giving the answer in that file's namespace, words the checker's English line holds)
WRONG = {
    "mean_over_ranks": ("check_corpus/mean.py", "sum_only", "mean_over_ranks: FAIL"),
    "mixed_adam_bytes": ("check_corpus/adam.py", "WRONG[1][1]", "mixed_adam_bytes: FAIL"),
    "ring_all_reduce": ("check_corpus/ring.py", "WRONG[1][1]", "ring_all_reduce: FAIL"),
    "average_gradients": ("check_corpus/grads.py", "WRONG[1][1]", "average_gradients: FAIL"),
    "zero1_step": ("check/test_zero_check.py", "wrong_state_size", "wrong shard bounds"),
    "fsdp_budget": ("check/test_check_fsdp.py", "(lambda c=WRONG[0][0]: lambda: c)()", "cost the most: wrap='model'"),
    "row_parallel": ("check/test_tp_check.py", "WRONG[4][0]", "bias is missing"),
    "schedule_1f1b": ("check/test_pipeline_check.py", "no_cooldown", "stage 0 never runs B5"),
    "accumulate_gradients": ("check_corpus/accum.py", "not_divided", "accumulate_gradients: FAIL"),
    "online_softmax_merge": ("check_corpus/merge.py", "WRONG[1][1]", "online_softmax_merge: FAIL"),
    "ep_dispatch": ("check_corpus/moe.py", "WRONG[1][1]", "ep_dispatch: FAIL"),
    # two functions (grid, reduce_over): the pair of the corpus
    "capstone_groups": ("check_corpus/capstone.py", "next(w[1] for w in WRONG if w[0] == 'TP outermost')",
                        "laid out dp-pp-tp (fastest-varying first)"),
}


def nbg(course, *args, timeout=600):
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    r = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, capture_output=True,
                       text=True, timeout=timeout, env=env)       # nbgrader runs `alembic` by name
    assert r.returncode == 0, f"nbgrader {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    made = grading.init(root)
    return root, made


def test_every_notebook_with_an_exercise_is_an_assignment(course):
    root, made = course
    want = [p.stem for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
            if exercises.BEGIN in p.read_text()]
    assert sorted(made) == sorted(want + [w + "_zh" for w in want])


def checker_of(nb, k=0):
    a, t = grading.exercises(nb)[k]
    return grading.checker_call(nb.cells[t].source).group(1)


def wrong_cell(answer_cell: str, name: str) -> str:
    """The exercise cell with the corpus's wrong answer in place of the function (of the
    functions: the expression then gives one for each, in order)."""
    file, expr, _ = WRONG[name]
    target = ", ".join(ln.split()[1].split("(")[0].rstrip(":") for ln in answer_cell.splitlines()
                       if ln.startswith(("def ", "class ")))
    path = TESTS / file
    return (f"_ns = {{'__name__': '__main__'}}\nimport sys; sys.path.insert(0, {str(TESTS)!r})\n"
            f"exec(compile(open({str(path)!r}).read(), {str(path)!r}, 'exec'), _ns)\n"
            f"{target} = eval({expr!r}, _ns)\n")


def submit(root, assignment, student, cell_sources):
    """A submission: the release with the exercise cells' sources replaced."""
    rel = root / "release" / assignment
    nbfile = next(rel.glob("*.ipynb"))
    nb = nbformat.read(nbfile, as_version=4)
    for i, src in cell_sources.items():
        nb.cells[i].source = src
    out = root / "submitted" / student / assignment
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out / nbfile.name)


def grades(root, assignment):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root}/gradebook.db") as gb:
        out = {}
        for s in gb.students:
            sub = gb.find_submission(assignment, s.id)
            out[s.id] = (sub.score, sub.max_score)
        return out


def outputs(root, student, assignment):
    nb = nbformat.read(next((root / "autograded" / student / assignment).glob("*.ipynb")), as_version=4)
    return {i: "".join(o.get("text", "") + json.dumps(o.get("data", {})) + " ".join(o.get("traceback", []))
                       for o in c.get("outputs", [])) for i, c in enumerate(nb.cells)}


# graded one by one in CI: one without a cluster, in Chinese (every exercise, right, wrong and
# tuned, is graded in tests/grading/test_grading_sweep.py, and 00_cluster on the hub in
# tests/runtime/test_hub_grading.py); the release is checked against the learner copy for three
CI_ASSIGNMENTS = ["01_memory_zh"]
RELEASE_CHECKED = ["00_cluster", "01_memory_zh", "09_memory_tricks"]
# an answer tuned to the visible case: right for micro=3 only (the hidden call tries micro=4)
TUNED = {"accumulate_gradients": ("    ### BEGIN SOLUTION", "    micro = 3\n    ### BEGIN SOLUTION")}


def assignments():
    stems = [p.stem for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if exercises.BEGIN in p.read_text()]
    if ALL:
        return [s + suffix for s in stems for suffix in ("", "_zh")]
    return CI_ASSIGNMENTS


def release_is_the_learner_copy(root, assignment):
    """nbgrader's release of the assignment is the learner copy of scripts/lab, cell for cell."""
    nbg(root, "generate_assignment", assignment, "--force")
    stem = assignment.removesuffix("_zh")
    release = nbformat.read(root / "release" / assignment / f"{stem}.ipynb", as_version=4)
    from labkit.course.translate import in_language
    nb, _ = in_language(nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4),
                        ROOT / "notebooks" / f"{stem}.ipynb", "zh" if assignment.endswith("_zh") else "en")
    learner = exercises.learner_copy(nb)
    assert [c.source for c in release.cells] == [c.source for c in learner.cells]


@pytest.mark.parametrize("assignment", [a for a in RELEASE_CHECKED if ALL or a not in CI_ASSIGNMENTS])
def test_the_release_is_the_learner_copy(course, assignment):
    release_is_the_learner_copy(course[0], assignment)


@pytest.mark.parametrize("assignment", assignments())
def test_right_gets_every_point_wrong_loses(course, assignment):
    root, _ = course
    release_is_the_learner_copy(root, assignment)
    stem = assignment.removesuffix("_zh")
    source = nbformat.read(root / "source" / assignment / f"{stem}.ipynb", as_version=4)
    pairs = grading.exercises(source)
    right = {a: source.cells[a].source for a, _ in pairs}
    wrong = {a: wrong_cell(source.cells[a].source, checker_of(source, k)) for k, (a, _) in enumerate(pairs)}
    submit(root, assignment, "right", right)
    submit(root, assignment, "wrong", wrong)
    tuned = {a: source.cells[a].source.replace(*TUNED[checker_of(source, k)])
             for k, (a, _) in enumerate(pairs) if checker_of(source, k) in TUNED}
    if tuned:
        submit(root, assignment, "tuned", {**right, **tuned})
    nbg(root, "autograde", assignment, "--force")
    got = grades(root, assignment)
    total = grading.POINTS * len(pairs)
    assert got["right"] == (total, total), (got, outputs(root, "right", assignment))
    assert got["wrong"][0] < total, got
    if tuned:
        share = grading.POINTS / (1 + len(grading.HIDDEN[checker_of(source)]))
        assert got["tuned"] == (total - share, total), (got, outputs(root, "tuned", assignment))
    out = outputs(root, "wrong", assignment)
    for k, (_, t) in enumerate(pairs):
        name = checker_of(source, k)
        words = WRONG[name][2] if not assignment.endswith("_zh") else f"{name}: FAIL"   # the diagnosis is in Chinese
        assert words in out[t] and f"{name}: FAIL" in out[t] and "WrongAnswer" in out[t], out[t]
