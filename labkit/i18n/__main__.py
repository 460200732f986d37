"""python -m labkit.i18n ...

    skeleton notebooks/00_cluster.ipynb --lang zh   print a translation file to start from: every
                                                    markdown cell (and every commented code cell)
                                                    with its marker, still in English
    check notebooks/00_cluster.ipynb --lang zh      what is wrong with its translation (exit 1 if any)
    hash notebooks/00_cluster.ipynb CELL_ID         the en= of one cell (after editing the English)
"""
import argparse
import pathlib
import sys

import nbformat

from labkit.i18n.cells import en_hash, problems, render
from labkit.i18n.notebooks import read_entries, translation_path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.i18n")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("skeleton", "check"):
        s = sub.add_parser(name)
        s.add_argument("notebook", type=pathlib.Path)
        s.add_argument("--lang", default="zh")
    h = sub.add_parser("hash")
    h.add_argument("notebook", type=pathlib.Path)
    h.add_argument("cell")
    args = p.parse_args(argv)
    nb = nbformat.read(args.notebook, as_version=4)
    if args.cmd == "hash":
        cell = next((c for c in nb.cells if c.get("id") == args.cell), None)
        if cell is None:
            print(f"{args.notebook}: no cell has id {args.cell}", file=sys.stderr)
            return 1
        print(en_hash(cell.source))
        return 0
    if args.cmd == "skeleton":
        cells = [c for c in nb.cells if c.cell_type == "markdown" or
                 (c.cell_type == "code" and "#" in c.source)]
        sys.stdout.write(render([(c.id, en_hash(c.source), c.source) for c in cells], args.lang))
        return 0
    entries = read_entries(args.notebook, args.lang)
    if entries is None:
        print(f"{translation_path(args.notebook, args.lang)}: no such file")
        return 1
    found = problems(nb, entries)
    for pr in found:
        print(f"{args.notebook} {pr}")
    print(f"{len(entries)} entries, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
