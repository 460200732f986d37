"""The old translation store, imported into the .po files (for branches begun before the move).

    python -m labkit.i18n convert [--lang zh] [--delete]

The old store: ``labkit/i18n/<lang>.py`` and ``labkit/i18n/<lang>_*.py`` (a dict ``MESSAGES``,
English key -> translation, read without importing them) and ``i18n/<lang>/<folder>/<stem>.md``
(entries ``<!-- labkit-<lang> cell=ID en=HASH -->`` followed by the translated cell). Whatever
of it is on disk (after merging a branch that still adds to it) is carried into
``labkit/locale/<lang>/LC_MESSAGES/labkit.po`` and ``i18n/<lang>/<folder>/<stem>.po``;
``--delete`` then removes it. Run it again and nothing changes.

An edit made in a .po is never lost: ``i18n/imported.json`` records what the last import wrote
for each entry (a hash). Where the .po still says that, a changed old-store text replaces it;
where the .po was edited since, the .po wins, and where both changed, the .po wins and the
conflict is printed. An old-store cell entry whose ``en=`` is not the hash of the current
English cell comes in fuzzy (it translated older English).
"""
import ast
import hashlib
import json
import pathlib
import re

import nbformat
import polib

from labkit.i18n import po as P
from labkit.i18n.extract import extract_messages

I18N = P.ROOT / "i18n"
BASE = I18N / "imported.json"
MARKER = re.compile(r"^<!-- labkit-(?P<lang>[a-z]+) cell=(?P<cell>\S+) en=(?P<en>[0-9a-f]{12}) -->[ \t]*$",
                    re.MULTILINE)
_STALE = "imported from the old store: it translated an older English (en={en}); check it"


def en_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def _h(*parts) -> str:
    return hashlib.sha256("\x04".join(p or "" for p in parts).encode("utf-8")).hexdigest()[:12]


# -- reading the old store -----------------------------------------------------------------
def _literal_messages(path: pathlib.Path) -> dict:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "MESSAGES":
            return ast.literal_eval(node.value)
    return {}


def _parts_order(base: pathlib.Path) -> list:
    for node in ast.parse(base.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PARTS":
            return list(ast.literal_eval(node.value))
    return []


def old_message_files(lang: str) -> list:
    """The old catalog's files in the order labkit.i18n.<lang> merged them (later wins)."""
    here = P.PKG / "i18n"
    base = here / f"{lang}.py"
    parts = _parts_order(base) if base.exists() else []
    found = sorted(p for p in here.glob(f"{lang}_*.py"))
    ordered = [base] if base.exists() else []
    ordered += [here / f"{n}.py" for n in parts if (here / f"{n}.py").exists()]
    ordered += [p for p in found if p not in ordered]
    return ordered


def old_messages(lang: str) -> dict:
    out = {}
    for path in old_message_files(lang):
        out.update(_literal_messages(path))
    return out


def old_cells(path: pathlib.Path, lang: str) -> list:
    """[(cell id, en hash, text)] of an old .md translation file."""
    text = path.read_text(encoding="utf-8")
    marks = list(MARKER.finditer(text))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end():end]
        body = body[1:] if body.startswith("\n") else body
        out.append((m["cell"], m["en"], body.rstrip()))
    return out


def old_cell_files(lang: str) -> list:
    return sorted(p for f in P.FOLDERS for p in (I18N / lang / f).glob("*.md"))


# -- the import ------------------------------------------------------------------------------
class Importer:
    def __init__(self, lang: str):
        self.lang = lang
        self.base = json.loads(BASE.read_text(encoding="utf-8")) if BASE.exists() else {}
        self.report = {"added": 0, "replaced": 0, "kept (edited in the .po)": 0, "conflicts": 0,
                       "fuzzy (older English)": 0, "unknown cells": 0}
        self.lines = []

    def take(self, where: str, key: str, have, new, fuzzy_new=False) -> bool:
        """Whether the old store's `new` (msgid, msgstr) replaces the .po's `have` (None: no
        entry or an empty one)."""
        base = self.base.setdefault(where, {})
        before, self.report_key = base.get(key), None
        base[key] = _h(*new)
        if have is None:
            self.report["added"] += 1
            return True
        if _h(*have) == _h(*new):
            return False
        if _h(*have) == before:                    # the .po says what the last import wrote
            self.report["replaced"] += 1
            return True
        if before is not None and before != _h(*new):
            self.report["conflicts"] += 1
            self.lines.append(f"{where} {key}: changed in the .po and in the old store since the "
                              "last import; the .po is kept")
        else:
            self.report["kept (edited in the .po)"] += 1
        base[key] = before if before is not None else base[key]
        return False

    def messages(self) -> pathlib.Path:
        from babel.messages.catalog import Catalog
        old = old_messages(self.lang)
        path = P.messages_po(self.lang)
        if not old:
            return None
        if path.exists():
            cat = P.read_catalog(path, self.lang)
        else:
            cat = Catalog(locale=self.lang, project=P.DOMAIN, charset="utf-8", fuzzy=False)
            for m in extract_messages():               # the order and locations of the source
                if m.id in old:
                    cat.add(m.id, "", locations=m.locations, auto_comments=m.auto_comments)
        where = str(path.relative_to(P.ROOT))
        for en, text in old.items():
            m = cat.get(en)
            gone = cat.obsolete.get(en)           # obsolete since: comes back only if changed
            have = (en, m.string) if m is not None and m.string and not m.fuzzy else \
                (en, gone.string) if gone is not None else None
            if self.take(where, _h(en), have, (en, text)):
                if gone is not None and m is None:     # its message was rewritten or removed here
                    gone.string = text
                    self.lines.append(f"{where}: {en!r} changed in the old store, but it is obsolete "
                                      f"here (#~; its message was rewritten or removed): carry {text!r} "
                                      "into the message that replaced it by hand")
                    continue
                if m is None:
                    cat.add(en, text)
                else:
                    m.string = text
                    m.flags.discard("fuzzy")
        P.write_catalog(cat, path)
        return path

    def cells(self, md: pathlib.Path) -> pathlib.Path:
        folder, stem = md.parent.name, md.stem
        nb_path = P.ROOT / folder / f"{stem}.ipynb"
        where_nb = f"{folder}/{stem}"
        if not nb_path.exists():
            self.lines.append(f"{md.relative_to(P.ROOT)}: no {where_nb}.ipynb; not imported")
            return None
        nb = nbformat.read(nb_path, as_version=4)
        cells = {c.get("id"): c for c in nb.cells}
        path = P.cells_po(nb_path, self.lang)
        po = P.read(path) if path.exists() else P.new_po(self.lang, where_nb)
        P.update_cells(po, P.cells_template(nb, where_nb), cells)
        where = str(path.relative_to(P.ROOT))
        entries = {e.msgctxt: e for e in po}
        for cell_id, en, text in old_cells(md, self.lang):
            cell = cells.get(cell_id)
            if cell is None:
                self.report["unknown cells"] += 1
                self.lines.append(f"{md.relative_to(P.ROOT)}: cell {cell_id} is not in {where_nb}.ipynb;"
                                  " not imported")
                continue
            stale = en != en_hash(cell.source)
            text = P.fit_ends(cell.source, text)
            e = entries.get(cell_id)
            have = (e.msgid, e.msgstr) if e is not None and e.msgstr and not e.obsolete else None
            if self.take(where, cell_id, have, (cell.source if not stale else en, text)):
                if e is None:
                    e = polib.POEntry(msgctxt=cell_id, msgid=cell.source, msgstr="",
                                      comment=P.CODE_COMMENT if cell.cell_type == "code"
                                      else P.MARKDOWN_COMMENT)
                    po.append(e)
                    entries[cell_id] = e
                e.msgid, e.msgstr, e.obsolete = cell.source, text, False
                e.flags = [f for f in e.flags if f != "fuzzy"]
                e.tcomment = ""
                if stale:
                    self.report["fuzzy (older English)"] += 1
                    e.flags.append("fuzzy")
                    e.tcomment = _STALE.format(en=en)
        order = {c.get("id"): i for i, c in enumerate(nb.cells)}
        po[:] = sorted(po, key=lambda e: (e.obsolete, order.get(e.msgctxt, len(order))))
        P.save(po, path)
        return path

    def save_base(self) -> None:
        BASE.write_text(json.dumps(self.base, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def convert(lang: str = "zh", delete: bool = False) -> list:
    """Import whatever of the old store is on disk; returns the lines to print."""
    imp = Importer(lang)
    written = []
    msg_files, cell_files = old_message_files(lang), old_cell_files(lang)
    p = imp.messages()
    if p:
        written.append(p)
    for md in cell_files:
        p = imp.cells(md)
        if p:
            written.append(p)
    if msg_files or cell_files:
        imp.save_base()
    if delete:
        for f in msg_files + cell_files:
            f.unlink()
    lines = imp.lines + [f"{len(msg_files)} message files and {len(cell_files)} cell files of the old "
                         f"store -> {len(written)} .po files" + ("; old store deleted" if delete else "")]
    lines.append(", ".join(f"{k} {v}" for k, v in imp.report.items()))
    return lines
