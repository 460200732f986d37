"""A notebook or deck in another language: its translation file, read, checked and applied.

    i18n/<lang>/<folder>/<stem>.po     beside notebooks/ and slides/ (folder: notebooks or slides)

A notebook without a translation file yet is kept in English (the note says so), so a
partly translated course is usable. A translated copy starts with one code cell that sets the
language of what labkit prints and draws (`labkit.set_lang`), id ``labkit-lang``.
"""
import copy
import pathlib

from labkit.i18n.cells import parse, translate, TranslationError
from labkit.i18n.po import cells_po

NAMES = {"zh": "Chinese"}
LANG_CELL_ID = "labkit-lang"
_LANG_CELL = {"zh": 'import labkit\nlabkit.set_lang("zh")   # labkit 打印的文字和画的图都用中文'}


def translation_path(nb_path: pathlib.Path, lang: str) -> pathlib.Path:
    """Where the translation of notebooks/<stem>.ipynb (or slides/...) lives."""
    return cells_po(nb_path, lang)


def read_entries(nb_path: pathlib.Path, lang: str):
    """The entries of the notebook's translation file (cell id -> Entry), None without one."""
    path = translation_path(nb_path, lang)
    if not path.exists():
        return None
    return parse(path.read_text(encoding="utf-8"), lang, where=str(path))


def lang_cell(lang: str):
    import nbformat
    cell = nbformat.v4.new_code_cell(_LANG_CELL[lang])
    cell["id"] = LANG_CELL_ID
    cell.metadata["slideshow"] = {"slide_type": "skip"}
    return cell


def in_language(nb, nb_path: pathlib.Path, lang: str) -> tuple:
    """(the notebook in `lang`, notes: lines for stderr about what stayed in English)."""
    if lang == "en":
        return nb, []
    name = f"{pathlib.Path(nb_path).parent.name}/{pathlib.Path(nb_path).name}"
    entries = read_entries(nb_path, lang)
    if entries is None:
        out, notes = copy.deepcopy(nb), [f"{name}: no {NAMES.get(lang, lang)} translation yet; "
                                          "copied in English"]
    else:
        out, found = translate(nb, entries)
        notes = [f"{name}: {p} (kept in English)" for p in found]
    out.cells.insert(0, lang_cell(lang))
    return out, notes


__all__ = ["translation_path", "read_entries", "in_language", "TranslationError", "LANG_CELL_ID"]
