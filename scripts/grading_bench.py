"""Autograde N (default 20) right submissions of one assignment (default 00_cluster) with nbgrader,
N with nbgrader's own Execute (every cell of the notebook: "whole") and N with
labkit.grading.run.Bounded (the cells the tests need: "needed"), on the same machine in the
order whole, needed, needed, whole (N/2 submissions each, so that a load that rises or falls
during the run weighs on both alike); prints each wall time, the scores and the ratio.

    .venv/bin/python scripts/grading_bench.py 00_cluster 20 [--only whole|needed]
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat

import labkit.grading as grading

p = argparse.ArgumentParser()
p.add_argument("assignment", nargs="?", default="00_cluster")
p.add_argument("n", nargs="?", type=int, default=20)
p.add_argument("--only", choices=["whole", "needed"])
args = p.parse_args()
a, n = args.assignment, args.n
env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ['PATH']}"}


def course(mode: str, n: int) -> pathlib.Path:
    root = pathlib.Path(tempfile.mkdtemp(prefix=f"grade{n}-{mode}-"))
    grading.init(root, langs=("zh",) if a.endswith("_zh") else ("en",))
    if mode == "whole":                     # nbgrader's default autograde: no Bounded
        cfg = root / "nbgrader_config.py"
        text = cfg.read_text()
        cut = text.index("c.Autograde.autograde_preprocessors")
        cfg.write_text(text[:cut])
    nbg(root, "generate_assignment", a, "--force")
    src = nbformat.read(next((root / "source" / a).glob("*.ipynb")), as_version=4)
    rel_path = next((root / "release" / a).glob("*.ipynb"))
    for k in range(n):
        nb = nbformat.read(rel_path, as_version=4)
        for i, _ in grading.exercises(src):
            nb.cells[i].source = src.cells[i].source
        out = root / "submitted" / f"s{k:02d}" / a
        out.mkdir(parents=True)
        nbformat.write(nb, out / rel_path.name)
    return root


def nbg(root, *x):
    subprocess.run([sys.executable, "-m", "nbgrader", *x], cwd=root, env=env, check=True,
                   capture_output=True)


def grade(root) -> tuple:
    from nbgrader.api import Gradebook
    t0 = time.monotonic()
    nbg(root, "autograde", a, "--force")
    took = time.monotonic() - t0
    with Gradebook(f"sqlite:///{root}/gradebook.db") as gb:
        scores = sorted(gb.find_submission(a, s.id).score for s in gb.students)
    return took, scores


took, got = {"whole": 0.0, "needed": 0.0}, {"whole": [], "needed": []}
order = [args.only] * 2 if args.only else ["whole", "needed", "needed", "whole"]
for block, mode in enumerate(order):
    m = n // 2 if block % 2 == 0 else n - n // 2
    root = course(mode, m)
    load = os.getloadavg()[0]
    t, scores = grade(root)
    took[mode] += t
    got[mode] += scores
    print(f"{mode}: autograde {m} submissions of {a}: {t:.0f} s ({t / m:.1f} s each); scores "
          f"{sorted(set(scores))}; load average {load:.1f} -> {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} cpus", flush=True)
    shutil.rmtree(root, ignore_errors=True)
for mode in set(order):
    print(f"{mode}: {len(got[mode])} submissions in {took[mode]:.0f} s ({took[mode] / len(got[mode]):.1f} s "
          f"each), scores {sorted(set(got[mode]))}")
if not args.only:
    print(f"needed / whole: {took['needed'] / took['whole']:.2f}")
