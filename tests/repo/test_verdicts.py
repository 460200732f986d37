"""Verdicts fail CI: a notebook cell that prints a checker's FAIL or a MISS fails under nbval.

`labkit.verdict` holds the words; the repository's conftest.py reads each nbval cell's outputs.
The end-to-end test writes a small notebook under build/ (inside the repository, so the root
conftest applies as it does to notebooks/ and build/learner) and runs pytest + nbval on it in a
subprocess, one kernel for every case.
"""
import os
import pathlib
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET

import pytest

from labkit.verdict import EXPECT_FAIL_TAG, failing_lines, verdict

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_failing_lines_vocabulary():
    text = "\n".join([
        "ring_all_reduce: FAIL (world size 2: rank 0 ...)",          # a checker
        "[rank 0] replicas_in_sync: FAIL (w differs)",                # a checker on a rank
        "mixed_adam_bytes: FAIL",                                     # no detail
        "MISS: ring sent 1.62 x S per rank, formula 1.50",            # a measurement
        "[rank 3] MISS: peak 12 MB, formula 10 MB",
    ])
    assert failing_lines(text) == text.splitlines()
    fine = "\n".join([
        "ring_all_reduce: pass (world sizes 2, 3, 4)",
        "ring_all_reduce: not implemented yet (replace the `raise NotImplementedError` ...)",
        "ok: ring sent 1.50 x S per rank, formula 1.50",
        "the FAIL below is the example's, not yours",
        "MISSING: a word that only starts like the marker",
        "rows: FAILED is not a checker's word",
    ])
    assert failing_lines(fine) == []


def test_verdict_prints_one_line(capsys):
    assert verdict(True, "1.50 against 1.50") is True
    assert verdict(False, "1.62 against 1.50") is False
    assert capsys.readouterr().out == "ok: 1.50 against 1.50\nMISS: 1.62 against 1.50\n"


CELLS = {   # cell name -> (source, tags, outcome under pytest)
    "checker_pass": ("from labkit.check import report\nreport('demo', True, 'all equal')", [], "passed"),
    "stub": ("print('demo: not implemented yet (replace the `raise NotImplementedError` line)')", [], "passed"),
    "measured_ok": ("from labkit.verdict import verdict\nverdict(True, 'sent 1.5000 x S, formula 1.5000')", [], "passed"),
    "checker_fail": ("report('demo', False, 'rank 1 differs by 0.5')", [], "failed"),
    "rank_fail": ("print('[rank 2] replicas_in_sync: FAIL (w differs)')", [], "failed"),
    "measured_miss": ("verdict(False, 'sent 1.62 x S, formula 1.50')", [], "failed"),
    "fail_on_purpose": ("report('demo', False, 'a broken example')", [EXPECT_FAIL_TAG], "passed"),
    "tag_without_fail": ("report('demo', True)", [EXPECT_FAIL_TAG], "failed"),
}


@pytest.mark.timeout(120)
def test_nbval_fails_a_cell_with_a_failing_verdict():
    import nbformat
    folder = ROOT / "build" / f"verdict-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src, metadata={"tags": tags}) for src, tags, _ in CELLS.values()]
    path = folder / "verdicts.ipynb"
    nbformat.write(nb, path)
    junit = folder / "junit.xml"
    measured = folder / "measured.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), LABKIT_MEASURED_VERDICTS=str(measured))
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", str(path.relative_to(ROOT)), "--nbval-lax",
                              "--nbval-current-env", "--nbval-cell-timeout=60", "-p", "no:cacheprovider",
                              "-q", f"--junitxml={junit}"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=110)
        cases = list(ET.parse(junit).getroot().iter("testcase"))
        recorded = measured.read_text().splitlines() if measured.exists() else []
        assert len(cases) == len(CELLS), run.stdout[-3000:] + run.stderr[-2000:]
        got = {}
        for case, name in zip(cases, CELLS):
            failed = case.find("failure") is not None or case.find("error") is not None
            got[name] = "failed" if failed else "passed"
    finally:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    want = {name: outcome for name, (_, _, outcome) in CELLS.items()}
    assert got == want, run.stdout[-3000:] + run.stderr[-2000:]
    assert "the cell printed a failing verdict" in run.stdout and "rank 1 differs by 0.5" in run.stdout
    # every measured verdict, kept or missed, is recorded with its notebook and cell (conftest.py)
    assert recorded == [f"{folder.name}/verdicts.ipynb Cell 2\tok: sent 1.5000 x S, formula 1.5000",
                        f"{folder.name}/verdicts.ipynb Cell 5\tMISS: sent 1.62 x S, formula 1.50"], recorded


def test_no_notebook_shows_a_verdict_the_nbval_rule_cannot_see():
    """Issue 33: a pass/FAIL column in a table, an ok/PROBLEM line or a bare boolean printed as a
    result is read by a person, not by conftest.py. A code cell that words a verdict itself must
    also say it through labkit.verdict (verdict(...) or a checker), so CI fails when it fails."""
    import json
    import re
    words = re.compile(r"""["'](?:pass|FAIL|PROBLEM|ok)["']\s+(?:if|else)\b|\belse\s+["'](?:FAIL|PROBLEM)["']""")
    bare = re.compile(r"""print\([^)]*:\s*["'],\s*\w+\)\s*$""", re.MULTILINE)     # print("...:", flag)
    unseen = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and (words.search(src) or bare.search(src)) and "verdict(" not in src:
                unseen.append(f"{path.name} {cell.get('id')}")
    assert not unseen, unseen
