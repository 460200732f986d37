#!/usr/bin/env python3
"""Lay tests/ out like the package (issue 34, section 5); rerun it on any newer main.

    .venv/bin/python scripts/tests_layout.py              # move, rewrite, compare the collections
    .venv/bin/python scripts/tests_layout.py --dry-run    # say what would move; change nothing
    .venv/bin/python scripts/tests_layout.py --no-collect # skip the two `pytest --collect-only`

Every step finds nothing to do the second time, so it can run again after each merge:

1. `pytest tests --collect-only -q`: the test ids before anything moves.
2. Each file still lying flat in tests/ goes to its folder with `git mv` (RULES in scripts/tests_layout_rules.py: the first
   pattern that matches the file name wins; then `test_<folder>...py` for any folder tests/
   already has; a module that is not a test is a helper and goes to tests/support/). A file no
   rule places is reported and stays where it is (exit status 1: add a rule). conftest.py,
   README.md and check_corpus/ (data: the answers the checkers are tested with) stay. A file in a
   folder that RULES now put in another (a rule follows a renamed labkit folder) moves there too.
3. In each file it moved, the paths computed from __file__ keep pointing where they pointed:
   ``parents[1]`` -> ``parents[2]``, ``.parent.parent`` -> ``.parent.parent.parent``,
   ``os.path.join(os.path.dirname(__file__), "..", ...)`` gains a "..", ``with_name("x.py")``
   finds x.py in its folder; a test module imported from another folder (``from test_x import``)
   gets that folder on sys.path in place of the file's own folder. Any other line with __file__
   is printed for a look. In a file already in a folder, ``parents[1] / "labkit"`` (a line that a
   branch begun before the move brought) becomes ``parents[2] / "labkit"`` when tests/labkit is
   not there and the repository's labkit/ is; a bare ``parents[1]`` there is printed for a look.
4. In every .py file under tests/: a helper imported by its bare name comes from the package
   ``support`` (``from runtime_helpers import gone`` -> ``from support.runtime_helpers import
   gone``, ``import proc_view`` -> ``from support import proc_view``, ``sys.modules.get(
   "deck_build")`` -> ``"support.deck_build"``). tests/ is on sys.path through tests/conftest.py
   (pytest's default import mode puts a conftest's folder there), which is also how
   ``check_corpus`` is found; the ranks get the notebook's sys.path with every task.
5. In every tracked text file (scripts/test's portable list, scripts/cpu-matrix, .ci/run, the root
   conftest.py, README.md, docs/, tests/, labkit/'s docstrings, a notebook and its .po files
   alike): ``tests/<file>.py`` (also ``tests/<glob>.py``, ``tests/<module>`` and a path through a
   folder the file left) names the file in its folder.
6. Collects again and compares the ids modulo the folder (``tests/zero/test_zero.py::x`` is
   ``tests/test_zero.py::x``): prints both counts and every difference (exit status 1 on one).

It stages what it did (git mv, git add) and commits nothing: read `git diff --cached -M`, then
commit.

After merging a branch begun before the move: git follows each moved file (an edit made to
tests/test_zero.py lands in tests/zero/test_zero.py); a new flat file is moved by the next run. A
conflict on a line this script rewrote (a path) or a rename/rename (a file renamed on one side,
moved here on the other): take the other side's text or name (`git checkout --ours/--theirs`, `git rm`
the moved copy), then run this again: it moves and rewrites it the same way. Test files keep
their names where they move, so `git log --follow` reads their history. pytest imports a test
module by its file name (rootdir-less folders, no __init__.py): two files with one name in two
folders would clash: the script names any such pair. Where a new test goes:
tests/README.md.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from tests_layout_rules import (ROOT, STAY, SUPPORT, TESTS, deeper, folder_for, helper_imports,
                               left_to_read, modulo_folder, named_paths, read, repo_meant, ruled, shallow)


def git(*args: str, check: bool = True) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=check, capture_output=True, text=True).stdout


def layout() -> tuple[set[str], dict[str, set[str]]]:
    """The tracked files directly in tests/, and file name -> folders of those one folder down
    (check_corpus/ aside)."""
    flat, nested = set(), {}
    for line in git("ls-files", "tests").splitlines():
        parts = Path(line).parts[1:]
        if len(parts) == 1:
            flat.add(parts[0])
        elif len(parts) == 2 and parts[0] != "check_corpus":
            nested.setdefault(parts[1], set()).add(parts[0])
    return flat, nested


def placed(flat: set[str], nested: dict[str, set[str]]) -> dict[str, str]:
    """file name -> its folder, for the names that are in one folder only and not in tests/ too
    (what `tests/<name>` in a text now means)."""
    return {n: next(iter(f)) for n, f in nested.items() if len(f) == 1 and n not in flat and n not in STAY}


# --- step 1 and 6: the collections ----------------------------------------------------------------
def collect(report: list[str], when: str) -> tuple[list[str], set[str]]:
    """The test ids `pytest tests --collect-only -q` prints (its last line is printed too), and the
    files it could not import (modulo the folder)."""
    r = subprocess.run([sys.executable, "-m", "pytest", "tests", "--collect-only", "-q",
                        "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    ids = [ln.strip() for ln in r.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]
    last = (r.stdout.strip().splitlines() or ["no output"])[-1]
    print(f"  {when}: {len(ids)} test ids ({last})")
    broken = {modulo_folder(m + "::")[:-2] for m in re.findall(r"^ERROR (tests/\S+\.py)", r.stdout, re.M)}
    if r.returncode != 0 and not (when == "before" and broken):
        report.append(f"pytest --collect-only {when}: exit status {r.returncode}:\n"
                      + "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:]))
    elif broken:
        print(f"  {when}: could not import {', '.join(sorted(broken))} (a bare helper import, fixed below?)")
    return ids, broken


def text_files() -> list[Path]:
    out = []
    for line in git("ls-files").splitlines():
        p = ROOT / line
        if line.startswith("scripts/tests_layout") or not p.is_file() or p.stat().st_size > 4_000_000:
            continue
        out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="say what would move; change nothing")
    ap.add_argument("--no-collect", action="store_true", help="skip the collections before and after")
    args = ap.parse_args(argv)
    report, look = [], []

    flat, nested = layout()
    folders = {f for fs in nested.values() for f in fs}
    untracked = [ln for ln in git("ls-files", "--others", "--exclude-standard", "tests").splitlines()
                 if len(Path(ln).parts) == 2 and Path(ln).name not in STAY]
    for u in untracked:
        report.append(f"{u}: not tracked by git, not moved (git add it, then run this again)")
    moves = {}
    for name in sorted(flat - STAY):
        dest = folder_for(name, folders)
        if dest is None:
            report.append(f"tests/{name}: no rule places it (add one to RULES in scripts/tests_layout_rules.py)")
        elif name in nested or (TESTS / dest / name).exists():
            there = ", ".join(f"tests/{f}/{name}" for f in sorted(nested.get(name, {dest})))
            report.append(f"tests/{name}: {there} exists already: not moved (merge the two by hand)")
        else:
            moves[name] = dest
    where = placed(flat, nested)
    # a file in a folder that RULES now put in another (a rule changed: labkit's folder was renamed)
    regroup = {n: (f, ruled(n)) for n, f in where.items() if ruled(n) not in (None, f) and n not in flat
               and not (TESTS / ruled(n) / n).exists()}

    print(f"{len(moves)} files to move, {len(where)} in their folders"
          + (f", {len(regroup)} of them to another folder" if regroup else ""))
    for name, dest in sorted(moves.items(), key=lambda kv: (kv[1], kv[0])):
        print(f"  tests/{name} -> tests/{dest}/{name}")
    for name, (was, dest) in sorted(regroup.items()):
        print(f"  tests/{was}/{name} -> tests/{dest}/{name}")
    if args.dry_run:
        for r in report:
            print("!", r)
        return 1 if report else 0

    before = None
    if (moves or regroup) and not args.no_collect:
        print("collecting the test ids before (pytest tests --collect-only -q) ...", flush=True)
        before, broken = collect(report, "before")

    # step 2: the moves
    old_text = {}
    for name, dest in moves.items():
        (TESTS / dest).mkdir(exist_ok=True)
        old_text[name] = (TESTS / name).read_text(encoding="utf-8") if name.endswith(".py") else None
        git("mv", f"tests/{name}", f"tests/{dest}/{name}")
        where[name] = dest
    for name, (was, dest) in regroup.items():                # same depth: no path from __file__ changes
        (TESTS / dest).mkdir(exist_ok=True)
        git("mv", f"tests/{was}/{name}", f"tests/{dest}/{name}")
        where[name] = dest
        if not any((TESTS / was).iterdir()):
            (TESTS / was).rmdir()
    changed = set()
    init = TESTS / SUPPORT / "__init__.py"
    if (TESTS / SUPPORT).is_dir() and not init.exists():
        init.write_text('"""Helpers of the tests (not tests): imported as `from support.<module> import ...`;\n'
                        "tests/ is on sys.path through tests/conftest.py. Some also run as programs or as\n"
                        'another user (isolation_attacker.py): their paths are named where they are started."""\n')
        changed.add(init)

    # step 3: paths from __file__ in what moved
    for name, dest in moves.items():
        if old_text[name] is None:
            continue
        p = TESTS / dest / name
        new = deeper(old_text[name], dest, where, report, name)
        if new != old_text[name]:
            p.write_text(new, encoding="utf-8")
            changed.add(p)
        look += left_to_read(old_text[name], new, f"tests/{dest}/{name}")

    # step 3b: in a file already in a folder, a path from __file__ that means the repository
    for p in sorted(TESTS.glob("*/*.py")):
        text = read(p)
        if p.parent.name != "check_corpus" and text is not None and (new := repo_meant(text)) != text:
            p.write_text(new, encoding="utf-8")
            changed.add(p)

    # step 4: helper imports, everywhere under tests/
    helpers = {Path(n).stem for n, f in where.items() if f == SUPPORT and n.endswith(".py")}
    for p in sorted(TESTS.rglob("*.py")):
        text = read(p)
        if text is not None and (new := helper_imports(text, helpers)) != text:
            p.write_text(new, encoding="utf-8")
            changed.add(p)

    # step 5: paths named anywhere in the repository
    for p in text_files():
        text = read(p)
        if text is None:
            continue
        new = named_paths(text, where, report, str(p.relative_to(ROOT)))
        if new != text:
            p.write_text(new, encoding="utf-8")
            changed.add(p)
    for p in sorted(changed):
        print(f"  rewrote {p.relative_to(ROOT)}")
    if changed:
        git("add", "--", *(str(p.relative_to(ROOT)) for p in sorted(changed)))

    # names pytest would import twice (one module name per file name)
    seen = {}
    for p in TESTS.rglob("test_*.py"):
        if "check_corpus" not in p.parts:
            seen.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    for name, paths in seen.items():
        if len(paths) > 1:
            report.append(f"{name} is in {' and '.join(paths)}: pytest imports both as {name[:-3]} (rename one)")

    status = 0
    if before is not None:
        print("collecting the test ids after ...", flush=True)
        after, _ = collect(report, "after")
        a, b = {modulo_folder(i) for i in after}, {modulo_folder(i) for i in before}
        fixed = {i for i in a - b if i.split("::")[0] in broken}
        if fixed:
            print(f"  {len(fixed)} ids of the files that could not be imported before are collected now")
            a -= fixed
        if a == b and len(after) - len(fixed) == len(before):
            print(f"the same {len(before)} test ids before and after, modulo the folder")
        else:
            status = 1
            for i in sorted(b - a):
                print(f"  only before: {i}")
            for i in sorted(a - b):
                print(f"  only after: {i}")
    for line in look:
        print(f"? {line}   (a path from __file__ this script did not change: still right?)")
    for line in shallow({f for f in where.values()}):
        print(f"? {line}   (tests/, not the repository: parents[2] meant?)")
    for r in report:
        print("!", r)
    if moves or regroup or changed:
        print("staged: read `git diff --cached -M --stat`, then commit")
    else:
        print("nothing to do: tests/ is laid out")
    return 1 if (status or report) else 0


if __name__ == "__main__":
    sys.exit(main())
