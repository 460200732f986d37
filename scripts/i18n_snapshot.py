"""What the translation store builds, written to a folder, to compare two stores (one-off check
for the move from the Python/Markdown store to gettext .po files; run it on both and diff -r).

    python scripts/i18n_snapshot.py OUT [--keys KEYS.json]

OUT/cells/<folder>/<stem>.ipynb   every notebook and deck as `in_language(..., "zh")` makes it
OUT/notes.txt                     what each build said stayed in English
OUT/learner-zh, solutions-zh, learner-en, solutions-en   `labkit.exercises.build` of notebooks/
OUT/messages.json                 tr(key) in Chinese for every key of the catalog (and KEYS.json's)
"""
import json
import os
import pathlib
import sys

import nbformat

ROOT = pathlib.Path.cwd()


def keys() -> set:
    out = set()
    try:
        from labkit.i18n import zh                      # the old store, where it still exists
        out |= set(zh.MESSAGES)
    except ImportError:
        pass
    po = ROOT / "labkit" / "locale" / "zh" / "LC_MESSAGES" / "labkit.po"
    if po.exists():
        import polib
        out |= {e.msgid for e in polib.pofile(str(po)) if not e.obsolete and not e.msgctxt}
    return out


def main(argv) -> int:
    out = pathlib.Path(argv[0])
    extra = set(json.loads(pathlib.Path(argv[2]).read_text())) if argv[1:2] == ["--keys"] else set()
    from labkit.course.exercises import build
    from labkit.i18n.messages import tr
    from labkit.course.translate import in_language
    notes = []
    for folder in ("notebooks", "slides"):
        (out / "cells" / folder).mkdir(parents=True, exist_ok=True)
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            nb, said = in_language(nbformat.read(path, as_version=4), path, "zh")
            notes += said
            (out / "cells" / folder / path.name).write_text(nbformat.writes(nb), encoding="utf-8")
    (out / "notes.txt").write_text("\n".join(notes) + "\n", encoding="utf-8")
    for lang in ("zh", "en"):
        build(ROOT / "notebooks", out / f"learner-{lang}", lang=lang, notes=[])
        build(ROOT / "notebooks", out / f"solutions-{lang}", lang=lang, solutions=True, notes=[])
    os.environ["LABKIT_LANG"] = "zh"
    msgs = {k: tr(k) for k in sorted(keys() | extra)}
    (out / "messages.json").write_text(json.dumps(msgs, ensure_ascii=False, indent=0, sort_keys=True),
                                       encoding="utf-8")
    print(f"{out}: {len(notes)} notes, {len(msgs)} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
