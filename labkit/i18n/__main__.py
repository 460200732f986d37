"""python -m labkit.i18n ...

    update [--lang zh]        extract the templates (labkit/locale/labkit.pot with Babel, one
                              i18n/templates/<folder>/<stem>.pot per notebook and deck) and merge
                              them into every .po of the language: new entries untranslated,
                              changed ones fuzzy with their previous English, removed ones #~
    check [--lang zh]         what is wrong with the translations (exit 1 if any): stale or fuzzy
                              cells, code cells whose code changed, untranslated markdown cells,
                              messages untranslated or fuzzy
    mo                        compile labkit/locale/<lang>/LC_MESSAGES/labkit.po into labkit.mo
                              beside it (what the standard library's gettext reads; scripts/setup
                              runs it, the package's build does it into the wheel: setup.py)
    convert [--lang zh] [--delete]
                              carry the old store (labkit/i18n/zh*.py, i18n/zh/*/*.md), where a
                              merged branch still has it, into the .po files (labkit.i18n.convert)
"""
import argparse
import sys


def update(lang: str, verbose=True) -> list:
    """Write the templates and merge them into the .po files of `lang`; returns lines to print."""
    import nbformat
    from labkit.i18n import po as P
    from labkit.i18n.extract import extract_messages
    lines = []
    pot = extract_messages()
    if P.MESSAGES_POT.exists():                    # the template's date moves only with its messages
        before = P.read_catalog(P.MESSAGES_POT)
        if {(m.context, m.id) for m in before if m.id} == {(m.context, m.id) for m in pot if m.id}:
            pot.creation_date = before.creation_date
    P.write_catalog(pot, P.MESSAGES_POT)
    path = P.messages_po(lang)
    if path.exists():
        cat = P.read_catalog(path, lang)
        before = {m.id for m in cat if m.id}
        P.merge_messages(cat, pot)
        fuzzy = sum(1 for m in cat if m.id and m.fuzzy)
        P.write_catalog(cat, path)
        lines.append(f"{path.relative_to(P.ROOT)}: {len(pot)} messages, {len({m.id for m in cat if m.id} - before)}"
                     f" new, {fuzzy} fuzzy, {len(cat.obsolete)} obsolete")
    for folder in P.FOLDERS:
        for nb_path in sorted((P.ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(nb_path, as_version=4)
            where = f"{folder}/{nb_path.stem}"
            tpl = P.cells_template(nb, where)
            P.save(tpl, P.cells_pot(nb_path))
            path = P.cells_po(nb_path, lang)
            if not path.exists():
                lines.append(f"{where}: no {lang} translation yet (start one: pybabel init -D {nb_path.stem} "
                             f"-i {P.cells_pot(nb_path).relative_to(P.ROOT)} -o {path.relative_to(P.ROOT)} -l {lang})")
                continue
            po = P.read(path)
            counts = P.update_cells(po, tpl, [c.get("id") for c in nb.cells])
            P.save(po, path)
            if any(counts.values()):
                lines.append(f"{path.relative_to(P.ROOT)}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return lines


def check(lang: str) -> list:
    import nbformat
    from labkit.i18n import po as P
    from labkit.i18n.cells import parse, problems
    out = []
    for folder in P.FOLDERS:
        for nb_path in sorted((P.ROOT / folder).glob("*.ipynb")):
            path = P.cells_po(nb_path, lang)
            if path.exists():
                nb = nbformat.read(nb_path, as_version=4)
                out += [f"{folder}/{nb_path.name} {p}" for p in problems(nb, parse(str(path), lang, str(path)))]
    path = P.messages_po(lang)
    for e in P.read(path) if path.exists() else []:
        if not e.obsolete and (not e.translated() or "fuzzy" in e.flags):
            out.append(f"{path.relative_to(P.ROOT)}: {'fuzzy' if 'fuzzy' in e.flags else 'untranslated'}: "
                       f"{e.msgid[:70]!r}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.i18n")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("mo")
    for name in ("update", "check", "convert"):
        s = sub.add_parser(name)
        s.add_argument("--lang", default="zh")
        if name == "convert":
            s.add_argument("--delete", action="store_true", help="remove the old store once imported")
    args = p.parse_args(argv)
    if args.cmd == "mo":
        from labkit.i18n.mo import build_all
        from labkit.i18n.po import LOCALE, ROOT
        print("\n".join(str(m.relative_to(ROOT)) for m in build_all(LOCALE)))
        return 0
    if args.cmd == "convert":
        from labkit.i18n.convert import convert
        print("\n".join(convert(args.lang, delete=args.delete)))
        return 0
    if args.cmd == "update":
        print("\n".join(update(args.lang)))
        return 0
    found = check(args.lang)
    print("\n".join(found + [f"{len(found)} problems"]))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
