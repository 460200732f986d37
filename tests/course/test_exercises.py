"""Exercises: the learner copy builder and the checkers' one-line verdicts."""
import nbformat
import pytest

import labkit
from labkit.course.exercises import ExerciseError, learner_copy, strip_solutions

SOURCE = '''def f(x):
    y = 1
    ### BEGIN SOLUTION
    y = x * 2
    return y
    ### END SOLUTION

def g():
        ### BEGIN SOLUTION
        return 3
        ### END SOLUTION
'''


def test_solutions_become_stubs_at_their_indentation():
    out, n = strip_solutions(SOURCE)
    assert n == 2
    assert "y = x * 2" not in out and "return 3" not in out and "SOLUTION" not in out
    assert '    raise NotImplementedError("exercise' in out
    assert '        raise NotImplementedError("exercise' in out
    ns = {}
    exec(out, ns)                                  # the learner copy still defines f and g
    with pytest.raises(NotImplementedError):
        ns["f"](1)


@pytest.mark.parametrize("bad,why", [
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "inside a function"),
    ("def f():\n    ### BEGIN SOLUTION\n    pass\n", "never closed"),
    ("def f():\n    pass\n    ### END SOLUTION\n", "without"),
])
def test_malformed_blocks_are_refused(bad, why):
    with pytest.raises(ExerciseError, match=why):
        strip_solutions(bad)


def test_learner_copy_drops_check_markers_and_outputs():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(SOURCE),
        nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nlabkit.check.x(f)"),
    ])
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="x: pass\n")]
    out = learner_copy(nb)
    assert out.cells[1].source == "labkit.check.x(f)" and out.cells[1].outputs == []
    assert "y = x * 2" in nb.cells[0].source, "the reference notebook is left alone"


def test_build_every_course_notebook(tmp_path):
    from labkit.course.exercises import build
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
    written = build(src, tmp_path)
    assert {p.name for p in written} == {p.name for p in src.glob("*.ipynb")}
    for p in written:
        for cell in nbformat.read(p, 4).cells:
            if cell.cell_type == "code":
                assert "### BEGIN SOLUTION" not in cell.source and "NBVAL_CHECK_OUTPUT" not in cell.source


# answers from check_corpus: a module the ranks import in no time (this one imports nbformat)
from check_corpus.mean import right_clone as _right, stub as _stub, sum_only as _sum_only  # noqa: E402


def test_checker_verdicts(cluster, capsys):
    assert labkit.check.mean_over_ranks(_right, cluster=cluster, timeout=120) is True
    assert capsys.readouterr().out == ("mean_over_ranks: pass "
                                       f"({cluster.world_size} ranks, 4 tensors of different shapes and dtypes)\n")
    assert labkit.check.mean_over_ranks(_sum_only, cluster=cluster, timeout=120) is False
    out = capsys.readouterr().out
    assert out.startswith("mean_over_ranks: FAIL (rank 0, case 0 (shape (4,), float32): the values are "
                          f"exactly {cluster.world_size} x the mean")   # more: tests/check/test_check_corpus.py
    assert labkit.check.mean_over_ranks(_stub, cluster=cluster) is False
    assert capsys.readouterr().out.startswith("mean_over_ranks: not implemented yet")


def test_checker_without_a_cluster_says_so(capsys, monkeypatch):
    from labkit.runtime import kernel
    monkeypatch.setattr(kernel, "_current", None)
    assert labkit.check.mean_over_ranks(_right) is False
    assert "start a cluster first" in capsys.readouterr().out


def test_keep_never_overwrites_the_learners_copy(tmp_path, capsys):
    from labkit.course.exercises import main
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.ipynb", "b.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SOURCE)]), src / name)
    dst = tmp_path / "learner"
    assert main(["build", str(src), str(dst), "--keep"]) == 0
    mine = nbformat.read(dst / "a.ipynb", as_version=4)
    mine.cells[0].source = "def f(x):\n    return 2 * x   # my answer\n"
    nbformat.write(mine, dst / "a.ipynb")
    (dst / "b.ipynb").unlink()
    assert main(["build", str(src), str(dst), "--keep"]) == 0
    assert "my answer" in nbformat.read(dst / "a.ipynb", as_version=4).cells[0].source
    assert (dst / "b.ipynb").exists()
    assert "wrote 1 learner notebooks" in capsys.readouterr().out.splitlines()[-1]
    assert main(["build", str(src), str(dst)]) == 0           # without --keep: fresh copies
    assert "my answer" not in nbformat.read(dst / "a.ipynb", as_version=4).cells[0].source


def test_nbval_markers_become_tags_the_learner_does_not_see():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\ncluster.run(broken)"),
        nbformat.v4.new_code_cell("x = 1\n  #  NBVAL_SKIP\ny = 2", metadata={"tags": ["keep-me"]}),
        nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(1)"),
        nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\ncheck(f)", metadata={"tags": ["nbval-check-output"]}),
        nbformat.v4.new_code_cell("# NBVAL_RAISES_EXCEPTION\nf()", metadata={"tags": ["raises-exception"]}),
    ])
    out = learner_copy(nb)
    assert [c.source for c in out.cells] == ["cluster.run(broken)", "x = 1\ny = 2", "print(1)", "check(f)", "f()"]
    assert [c.metadata.get("tags") for c in out.cells] == [
        ["raises-exception"], ["keep-me", "nbval-skip"], ["nbval-ignore-output"], None, ["raises-exception"]]
    with pytest.raises(ExerciseError, match="unknown nbval marker NBVAL_TYPO"):
        learner_copy(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# NBVAL_TYPO\n1")]))


def test_course_learner_copies_have_no_nbval_comments(tmp_path):
    """Every learner copy: no `NBVAL_` in any code cell, and every reference tag kept except the
    output check (dropped), so nbval treats the copy as before."""
    from labkit.course.exercises import build, _DROPPED_TAGS
    import pathlib
    src = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
    tagged = 0
    for path in build(src, tmp_path):
        ref = nbformat.read(src / path.name, as_version=4)
        mine = nbformat.read(path, as_version=4)
        for n, (a, b) in enumerate(zip(ref.cells, mine.cells)):
            if b.cell_type != "code":
                continue
            assert "NBVAL_" not in b.source, f"{path.name} cell {n}"
            kept = [t for t in a.metadata.get("tags", []) if t not in _DROPPED_TAGS]
            assert b.metadata.get("tags", []) == kept, f"{path.name} cell {n}"
            tagged += "raises-exception" in kept
    assert tagged >= 6, tagged                       # the course's deliberate errors, still tagged


# --- one hang limit for every checker ---------------------------------------------------------
# A checker that runs the learner's code on the ranks reports a hang after guard.HANG_LIMIT_S
# (the 10 s README and notebook 02 promise). Runs of labkit's own code may take longer:
HANG_EXEMPT = {
    "comm.py:ring_all_reduce": "cluster.run(_setup, timeout=120): labkit builds the sub-groups, no learner code",
    "comm.py:_tidy": "cluster.run(_drain, timeout=3): labkit meets messages a broken ring left behind",
    "fsdp.py:_peaks": "cluster.run(_measure_many, timeout=120): labkit's FSDP2 runs, the learner only chose",
    "zero.py:zero1_step": "cluster.run(trial, reference_step, timeout=30): labkit's reference step",
}
# Checkers in files other engineers own that do not use it yet ("file:function": the change);
# the lead empties this set after merging. The test fails when an entry no longer offends.
HANG_TODO_OTHERS = {}


def _hang_offenders() -> set:
    """'file:function' of every checker whose timeout default is not HANG_LIMIT_S, and of every
    cluster.run(..., timeout=<number>) not exempt; 'zero.py:TIMEOUT_S' while zero.py keeps its own."""
    import ast
    import importlib
    import inspect
    import pathlib
    import labkit.check as check
    from labkit.check.guard import HANG_LIMIT_S
    folder = pathlib.Path(check.__file__).parent
    bad = set()
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
                for kw in call.keywords:
                    if kw.arg == "timeout" and isinstance(kw.value, ast.Constant):
                        bad.add(f"{path.name}:{fn.name}")
        if path.stem == "__init__":
            continue
        mod = importlib.import_module(f"labkit.check.{path.stem}")
        for name in getattr(mod, "__all__", ()):
            p = inspect.signature(getattr(mod, name)).parameters.get("timeout")
            if p is not None and p.default != HANG_LIMIT_S:
                bad.add(f"{path.name}:{name}")
        if "TIMEOUT_S" in vars(mod) and "HANG_LIMIT_S" not in vars(mod):
            bad.add(f"{path.name}:TIMEOUT_S")
    return bad - set(HANG_EXEMPT)


def test_every_checker_reports_a_hang_after_one_limit():
    from labkit.check.guard import HANG_LIMIT_S
    assert HANG_LIMIT_S == 10.0, "README and notebook 02 promise a hang is reported after 10 s"
    bad = _hang_offenders()
    assert bad - set(HANG_TODO_OTHERS) == set(), "use labkit.check.guard.HANG_LIMIT_S"
    assert set(HANG_TODO_OTHERS) - bad == set(), "fixed: take these out of HANG_TODO_OTHERS"
