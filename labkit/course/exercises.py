"""Build the learner copies of the course notebooks.

    python -m labkit.exercises build notebooks build/learner          # (re)write every copy
    python -m labkit.exercises build notebooks learner --keep         # only the missing ones
    python -m labkit.exercises build notebooks build/learner-zh --lang zh              # in Chinese
    python -m labkit.exercises build notebooks notebooks-zh --lang zh --solutions      # solutions kept

`--lang zh` applies the translations in ``i18n/zh/notebooks/<stem>.po`` first (`labkit.course.translate`:
markdown cells, and code cells whose comments are translated); a notebook without a translation
yet is copied in English with one line on stderr saying so. `--solutions` copies the notebooks
with their solutions (for a translated copy of the course as committed).

`--keep` is the learner's route (`bash scripts/lab`): a copy that is already there holds the
learner's work and is never overwritten; delete it to get a fresh one. Without it every copy
is rewritten (the tests and CI run fresh copies).

The committed notebooks hold each exercise's reference solution between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` (inside a function body). The learner copy
replaces each such block with ``raise NotImplementedError(...)`` at the same indentation, so
the learner copy still runs top to bottom.

nbval's markers are for the tests, not the learner: the committed notebooks carry them as cell
metadata tags (``raises-exception``, ``nbval-skip``, ``nbval-check-output``), which the learner
does not see; the copy keeps them. A ``# NBVAL_...`` comment line, should one come back, is taken
out of the learner's cell and kept as its tag (``# NBVAL_SKIP`` -> ``nbval-skip``,
``# NBVAL_RAISES_EXCEPTION`` -> ``raises-exception``), which nbval reads the same way. The check
of output is dropped (comment and tag): a learner's checker line says "not implemented yet",
not "pass".
"""
import argparse
import copy
import pathlib
import re
import sys

import nbformat

from labkit.i18n.cells import TranslationError
from labkit.i18n.lang import LANGS

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = 'raise NotImplementedError("exercise: replace this line with your code")'
_MARKER = re.compile(r"^[ \t]*#+[ \t]*(NBVAL_[A-Z_]+)[ \t]*(?:\n|$)", re.MULTILINE)
_TAGS = {"NBVAL_SKIP": "nbval-skip", "NBVAL_RAISES_EXCEPTION": "raises-exception",
         "NBVAL_IGNORE_OUTPUT": "nbval-ignore-output", "NBVAL_CHECK_OUTPUT": None}
_DROPPED_TAGS = {"nbval-check-output"}


class ExerciseError(ValueError):
    pass


def strip_solutions(source: str, where: str = "cell") -> tuple:
    """Return (learner source, number of solution blocks replaced)."""
    out, inside, indent, count = [], False, "", 0
    for i, line in enumerate(source.splitlines(keepends=True), 1):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside:
                raise ExerciseError(f"{where}, line {i}: {BEGIN} inside another solution block")
            indent = line[: len(line) - len(line.lstrip())]
            if not indent:
                raise ExerciseError(f"{where}, line {i}: a solution block must be inside a function "
                                    "body, so the learner copy still runs top to bottom")
            inside, count = True, count + 1
            out.append(f"{indent}{STUB}\n")
        elif stripped.startswith(END):
            if not inside:
                raise ExerciseError(f"{where}, line {i}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ExerciseError(f"{where}: {BEGIN} is never closed by {END}")
    text = "".join(out)
    # a cell that ended with END's line ends with the stub's, as nbgrader's release does
    return (text if source.endswith("\n") else text.removesuffix("\n")), count


def learner_copy(nb):
    nb = copy.deepcopy(nb)
    for n, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell.source, _ = strip_solutions(cell.source, f"cell {n}")
        cell.source, tags = markers_to_tags(cell.source, cell.metadata.get("tags", []), f"cell {n}")
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        cell.outputs, cell.execution_count = [], None
    return nb


def markers_to_tags(source: str, tags: list, where: str = "cell") -> tuple:
    """(source without ``# NBVAL_...`` comment lines, tags with their metadata form added and
    the output check dropped)."""
    found = _MARKER.findall(source)
    unknown = [m for m in found if m not in _TAGS]
    if unknown:
        raise ExerciseError(f"{where}: unknown nbval marker {unknown[0]} (known: {', '.join(_TAGS)})")
    out = [t for t in tags if t not in _DROPPED_TAGS]
    out += [_TAGS[m] for m in found if _TAGS[m] and _TAGS[m] not in out]
    return _MARKER.sub("", source), out


def build(src: pathlib.Path, dst: pathlib.Path, keep: bool = False, lang: str = "en",
          solutions: bool = False, notes=None, only=None) -> list:
    """Write the learner copy of every notebook in src to dst (in `lang`; with solutions, the
    solutions kept); with keep, leave the copies already in dst alone (the learner's work).
    Returns the paths written; what stayed in English is appended to `notes` (or printed to
    stderr when notes is None). `only`: names that the notebooks' file names start with."""
    from labkit.course.translate import in_language
    dst.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src.glob("*.ipynb")):
        if (keep and (dst / path.name).exists()) or (only and not path.name.startswith(tuple(only))):
            continue
        nb = nbformat.read(path, as_version=4)
        nb, said = in_language(nb, path, lang)
        if notes is None:
            for line in said:
                print(line, file=sys.stderr)
        else:
            notes.extend(said)
        if solutions:
            nb = copy.deepcopy(nb)
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
        else:
            nb = learner_copy(nb)
        nbformat.write(nb, dst / path.name)
        written.append(dst / path.name)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.exercises")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write learner copies (solutions replaced by stubs)")
    b.add_argument("src", type=pathlib.Path)
    b.add_argument("dst", type=pathlib.Path)
    b.add_argument("--keep", action="store_true",
                   help="write only the copies that are missing; never overwrite one (your work)")
    b.add_argument("--lang", default="en", choices=LANGS,
                   help="the language of the copies (default en; a notebook not translated yet "
                        "is copied in English, with a line on stderr)")
    b.add_argument("--solutions", action="store_true",
                   help="keep the solutions (copies of the course as committed, in --lang)")
    b.add_argument("--only", action="append",
                   help="only the notebooks whose name starts with this (repeatable)")
    args = p.parse_args(argv)
    try:
        files = build(args.src, args.dst, keep=args.keep, lang=args.lang, solutions=args.solutions,
                      only=args.only)
    except (ExerciseError, TranslationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    kept = len([p for p in args.src.glob("*.ipynb") if not args.only or p.name.startswith(tuple(args.only))]) - len(files)
    what = "notebooks with solutions" if args.solutions else "learner notebooks"
    print(f"wrote {len(files)} {what} to {args.dst}" + (f" (language: {args.lang})" if args.lang != "en" else "") +
          (f"; kept the {kept} already there (your work: delete one to get a fresh copy)"
           if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
