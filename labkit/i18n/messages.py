"""`tr`: a message in the current language (pure).

    tr("failed on rank {rank}: {error}", rank=2, error=msg)

The English text with its format fields is the key; a language's catalog (``zh.py``:
``MESSAGES``) maps it to the same text with the same fields. A key that a catalog lacks is
printed in English. Words that programs read are never translated: ``pass``, ``FAIL``, ``ok:``,
``MISS:`` and a checker's name stay as they are in every language (labkit.verdict).
"""
import importlib
import string

from labkit.i18n.lang import lang

_catalogs = {}


def catalog(code: str) -> dict:
    """English text -> text in `code` (empty for English)."""
    if code == "en":
        return {}
    if code not in _catalogs:
        _catalogs[code] = importlib.import_module(f"labkit.i18n.{code}").MESSAGES
    return _catalogs[code]


def tr(text: str, /, **fields) -> str:
    """`text` in the current language, formatted with `fields` (no fields: no formatting)."""
    out = catalog(lang()).get(text, text)
    return out.format(**fields) if fields else out


def tr_fig(text: str, /, **fields) -> str:
    """`tr` for text drawn in a figure: in a language with its own script, matplotlib is set
    to draw it first (or `fonts.MissingFont` says which font to install)."""
    if lang() == "zh":
        from labkit.i18n.fonts import use_cjk
        use_cjk()
    return tr(text, **fields)


def fields_of(text: str) -> list:
    """The format fields of a message, in order (``"{rank} of {n:,}"`` -> ["rank", "n"])."""
    return [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
