"""The course as an nbgrader course, and the grade of a test cell from labkit's checkers.

    python -m labkit.grading init COURSE_DIR            # nbgrader_config.py + source/<assignment>/

`init` writes one assignment per notebook that holds an exercise (a ``### BEGIN SOLUTION``
block), found by reading every notebook, so a new notebook with an exercise is picked up
without a change here; in English (``00_cluster``) and in Chinese (``00_cluster_zh``). In each:

- the exercise cell becomes an nbgrader "autograded answer" cell (its solution block is what
  nbgrader's release replaces, by the same stub line as `labkit.exercises`, set in
  nbgrader_config.py, so the release is cell for cell the learner copy of `scripts/lab`);
- the checker cell right after it becomes an "autograder tests" cell worth `POINTS`, with
  hidden tests (between nbgrader's ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``,
  which the release drops): `cases` first, then the visible checker call as the learner has
  it, then the hidden calls of `HIDDEN` and `score`.

Partial credit: the cell's points are split evenly over its checker calls (the visible one and
each hidden one); `score` makes the cell's value the points earned, which nbgrader takes as the
cell's grade, and raises `WrongAnswer` (no points) when none passed. Inside one call a checker
stops at the first case that differs and prints one line, so one call is all or nothing.

Outside a grading cell, under nbgrader, every checker raises `WrongAnswer` after a FAIL or
"not implemented yet" line (labkit.verdict.graded); a learner's own run never raises.
"""
import pathlib
import re

from labkit import verdict
from labkit.verdict import WrongAnswer  # noqa: F401

POINTS = 5                 # each exercise's test cell
# hidden checker calls, by checker: the same checker on cases the visible call does not try
HIDDEN = {
    "schedule_1f1b": ["microbatches=5"],
    "accumulate_gradients": ["micro=4"],
    "average_gradients": ["steps=5"],
    "zero1_step": ["steps=5"],
}
_CALL = re.compile(r"^labkit\.check\.(\w+)\((\w+)(.*)\);?\s*$")


def cases(points: float) -> None:
    """Open a grading cell worth `points`: the checker calls after this record their verdict."""
    verdict.LEDGER.clear()
    verdict._open[0] = True
    _points[0] = float(points)


_points = [0.0]


def score():
    """Close the grading cell: the points earned (its value, which nbgrader reads as partial
    credit); under nbgrader WrongAnswer when no checker call passed."""
    verdict._open[0] = False
    calls = list(verdict.LEDGER)
    verdict.LEDGER.clear()
    passed = sum(ok for _, ok in calls)
    if not calls or (passed == 0 and verdict.grading()):
        raise WrongAnswer(f"no checker call passed ({len(calls)} tried)")
    return round(_points[0] * passed / len(calls), 2)


def test_source(call: str, points: float = POINTS) -> str:
    """The source of an autograder tests cell around the learner's checker line `call`."""
    m = _CALL.match(call.strip())
    if m is None:
        raise ValueError(f"not a checker call: {call!r}")
    name, fn, rest = m.groups()
    hidden = [f"labkit.check.{name}({fn}{rest}, {kw});"
              for kw in HIDDEN.get(name, [])]
    return "\n".join(["### BEGIN HIDDEN TESTS", f"import labkit.grading; labkit.grading.cases({points:g})",
                      "### END HIDDEN TESTS", call.strip(), "### BEGIN HIDDEN TESTS", *hidden,
                      "labkit.grading.score()", "### END HIDDEN TESTS"])


def exercises(nb) -> list:
    """[(index of the exercise cell, index of its checker cell)] of a notebook."""
    from labkit.exercises import BEGIN
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and BEGIN in cell.source:
            nxt = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
            if nxt is None or nxt.cell_type != "code" or checker_call(nxt.source) is None:
                raise ValueError(f"cell {i}: an exercise must be followed by its checker call, "
                                 f"one line `labkit.check.NAME(fn);`")
            found.append((i, i + 1))
    return found


def checker_call(source: str):
    """The first ``labkit.check.NAME(fn...)`` line of a cell's source, as a match (or None)."""
    return next((m for m in map(_CALL.match, source.splitlines()) if m), None)


def _meta(kind: str, grade_id: str, points=None) -> dict:
    m = {"grade": kind == "tests", "solution": kind == "answer", "locked": kind == "tests",
         "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        m["points"] = points
    return m


def graded_copy(nb, stem: str):
    """The notebook with nbgrader's metadata on its exercise and checker cells."""
    pairs = exercises(nb)
    for k, (a, t) in enumerate(pairs):
        answer, tests = nb.cells[a], nb.cells[t]
        answer.metadata["nbgrader"] = _meta("answer", f"{stem}_exercise_{k}")
        tests.metadata["nbgrader"] = _meta("tests", f"{stem}_check_{k}", POINTS)
        tests.source = test_source(tests.source)
        tags = [x for x in tests.metadata.get("tags", []) if x != "nbval-check-output"]
        if tags:
            tests.metadata["tags"] = tags
        else:
            tests.metadata.pop("tags", None)
    return nb


CONFIG = '''\
# nbgrader's configuration for labkit's course (python -m labkit.grading init)
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course!r}
c.CourseDirectory.root = {root!r}
# the release's stub is labkit's (labkit.exercises.STUB): the same cells as scripts/lab's copies
c.ClearSolutions.code_stub = {{"python": {stub!r}}}
# nbgrader finds its markers anywhere in a line, markdown included, and the course's text names
# them; labkit's solution blocks are always inside a function body (labkit.exercises), so the
# markers nbgrader looks for start indented
c.ClearSolutions.begin_solution_delimeter = "    ### BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "    ### END SOLUTION"
# a cell may start a cluster or run a checker (each checker reports a hang after its own limit);
# a cell still running after this is interrupted and counts as an error, and grading goes on
c.Execute.timeout = {timeout}
c.Execute.interrupt_on_timeout = True
# autograde runs only the cells the tests cells need, each submission within its own limit; a
# hung or dead kernel is replaced and grading goes on (labkit/grading/run.py)
c.Autograde.autograde_preprocessors = [
    "labkit.grading.run.Bounded",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Bounded.submission_timeout = {submission_timeout}
'''
TIMEOUT_S = 120               # each cell
SUBMISSION_TIMEOUT_S = 300    # each submission (labkit.grading.run.Bounded)


def write_config(course_dir, course_id: str = "labkit") -> pathlib.Path:
    """course_dir/nbgrader_config.py (the folder made if needed); the folder, resolved."""
    from labkit.exercises import STUB
    root = pathlib.Path(course_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text(CONFIG.format(
        course=course_id, root=str(root), stub=STUB, timeout=TIMEOUT_S,
        submission_timeout=SUBMISSION_TIMEOUT_S))
    return root


def init(course_dir, notebooks=None, course_id: str = "labkit", langs=("en", "zh")) -> list:
    """Write nbgrader_config.py and source/<assignment>/ into course_dir; the assignments."""
    import copy
    import tempfile
    import nbformat
    from labkit import exercises as ex
    root = write_config(course_dir, course_id)
    src = pathlib.Path(notebooks) if notebooks else pathlib.Path(__file__).resolve().parents[2] / "notebooks"
    made = []
    with_exercise = [p for p in sorted(src.glob("*.ipynb"))
                     if exercises(nbformat.read(p, as_version=4))]
    for lang in langs:
        with tempfile.TemporaryDirectory() as tmp:
            only = [p.stem for p in with_exercise]
            for path in ex.build(src, pathlib.Path(tmp), lang=lang, solutions=True, notes=[], only=only):
                if path.stem not in only:
                    continue
                name = path.stem + ("" if lang == "en" else f"_{lang}")
                nb = graded_copy(copy.deepcopy(nbformat.read(path, as_version=4)), path.stem)
                out = root / "source" / name
                out.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, out / path.name)
                made.append(name)
    return made
