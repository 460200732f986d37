"""Autograde N (default 20) right submissions of one assignment (default 00_cluster) with nbgrader;
prints the wall time. .venv/bin/python scripts/grading_bench.py 00_cluster 20"""
import os, pathlib, subprocess, sys, time, tempfile
import nbformat
import labkit.grading as grading
a = sys.argv[1] if len(sys.argv) > 1 else "00_cluster"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
root = pathlib.Path(tempfile.mkdtemp(prefix="grade20-"))
grading.init(root, langs=("en",))
env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}"}
nbg = lambda *x: subprocess.run([sys.executable, "-m", "nbgrader", *x], cwd=root, env=env, check=True, capture_output=True)
nbg("generate_assignment", a, "--force")
src = nbformat.read(next((root / "source" / a).glob("*.ipynb")), as_version=4)
rel_path = next((root / "release" / a).glob("*.ipynb"))
for k in range(n):
    nb = nbformat.read(rel_path, as_version=4)
    for i, _ in grading.exercises(src):
        nb.cells[i].source = src.cells[i].source
    out = root / "submitted" / f"s{k:02d}" / a
    out.mkdir(parents=True)
    nbformat.write(nb, out / rel_path.name)
t0 = time.monotonic()
nbg("autograde", a, "--force")
took = time.monotonic() - t0
from nbgrader.api import Gradebook
with Gradebook(f"sqlite:///{root}/gradebook.db") as gb:
    scores = [gb.find_submission(a, s.id).score for s in gb.students]
print(f"autograde {n} submissions of {a}: {took:.0f} s ({took/n:.1f} s each); scores {sorted(set(scores))} on {os.cpu_count()} cpus")
