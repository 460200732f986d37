"""`tr`: a message in the current language (pure: reads the .po file, starts no process).

    tr("failed on rank {rank}: {error}", rank=2, error=msg)
    trn("{n} rank is waiting", "{n} ranks are waiting", n)       # plural forms
    trc("graph", "node")                                          # a short text with its context
    N_("per rank")                                                # a text translated later

The English text with its format fields is the key (gettext's msgid); a language's catalog
``labkit/locale/<lang>/LC_MESSAGES/labkit.po`` maps it to the same text with the same fields.
A key the catalog lacks (or has only as a fuzzy or empty entry) is printed in English. Words
that programs read are never translated: ``pass``, ``FAIL``, ``ok:``, ``MISS:`` and a checker's
name stay as they are in every language (labkit.verdict). Keys are string literals only, never
built from pieces or computed, so that `pybabel extract` (labkit.i18n.po.KEYWORDS) finds them.
"""
import gettext
import pathlib

from labkit.i18n.lang import lang

LOCALE = pathlib.Path(__file__).resolve().parents[1] / "locale"     # as labkit.i18n.po.LOCALE


def messages_po(code: str) -> pathlib.Path:
    """labkit/locale/<code>/LC_MESSAGES/labkit.po (labkit.i18n.po.messages_po, without
    importing polib and Babel: a learner's import reads only the compiled .mo)."""
    return LOCALE / code / "LC_MESSAGES" / "labkit.po"


def fields_of(text: str) -> list:
    """The format fields of a message, in order (labkit.i18n.po.fields_of)."""
    from labkit.i18n.po import fields_of as fields
    return fields(text)

_catalogs = {}


class Catalog(dict):
    """(context or None, English) -> translation (str, or a list for a plural entry), and the
    language's plural rule."""

    def __init__(self, entries=(), plural="nplurals=2; plural=(n != 1);"):
        super().__init__(entries)
        self.plural = gettext.c2py(plural.split("plural=", 1)[1].rstrip(";").strip()) \
            if "plural=" in plural else (lambda n: int(n != 1))

    def get_text(self, text, context=None):
        return super().get((context, text), text)

    # a plain English key stands for (no context, key): catalog(lang()).get(text, text)
    def get(self, key, default=None):
        return super().get((None, key) if isinstance(key, str) else key, default)

    def __getitem__(self, key):
        return super().__getitem__((None, key) if isinstance(key, str) else key)

    def __contains__(self, key):
        return super().__contains__((None, key) if isinstance(key, str) else key)


def load(code: str, path=None) -> Catalog:
    """The catalog of `code`: its compiled .mo beside the .po, read with the standard library's
    gettext, where one was built from the .po as it is now (labkit.i18n.mo); else the .po itself,
    read with polib (empty when there is neither)."""
    path = pathlib.Path(path or messages_po(code))
    compiled = _load_mo(path.with_suffix(".mo"), path)
    if compiled is not None:
        return compiled
    return load_po(path)


def load_po(path: pathlib.Path) -> Catalog:
    """The catalog as polib reads the .po `path`: translated, not fuzzy, not obsolete (empty
    where there is no such file)."""
    if not path.exists():
        return Catalog()
    import polib
    po = polib.pofile(str(path))
    out = Catalog(plural=po.metadata.get("Plural-Forms", ""))
    for e in po:
        if e.obsolete or "fuzzy" in e.flags:
            continue
        if e.msgid_plural:
            forms = [e.msgstr_plural[k] for k in sorted(e.msgstr_plural)]
            if all(forms):
                out[(e.msgctxt, e.msgid)] = forms
        elif e.msgstr:
            out[(e.msgctxt, e.msgid)] = e.msgstr
    return out


def _load_mo(mo: pathlib.Path, po: pathlib.Path):
    """The Catalog of a .mo file, or None where there is none or it was built from another
    version of `po` (a translator's edit not compiled yet: the .po is read instead)."""
    from labkit.i18n.mo import is_current
    if not mo.exists():
        return None
    with open(mo, "rb") as f:
        t = gettext.GNUTranslations(f)
    if po.exists() and not is_current(t.info(), po):
        return None
    out = Catalog(plural=t.info().get("plural-forms", ""))
    plurals = {}
    for key, text in t._catalog.items():        # gettext's own table: msgid or (msgid, form)
        msgid, form = key if isinstance(key, tuple) else (key, None)
        if not msgid:
            continue                            # the header
        ctx, _, msgid = msgid.rpartition("\x04") if "\x04" in msgid else (None, "", msgid)
        if form is None:
            out[(ctx, msgid)] = text
        else:
            plurals.setdefault((ctx, msgid), {})[form] = text
    for k, forms in plurals.items():
        out[k] = [forms[i] for i in sorted(forms)]
    return out


def catalog(code: str) -> Catalog:
    """(context, English text) -> text in `code` (empty for English)."""
    if code == "en":
        return Catalog()
    if code not in _catalogs:
        _catalogs[code] = load(code)
    return _catalogs[code]


def messages(code: str) -> dict:
    """English text -> text in `code`, for the messages without a context and plural."""
    return {en: t for (ctx, en), t in catalog(code).items() if ctx is None and isinstance(t, str)}


def _format(out: str, fields: dict) -> str:
    return out.format(**fields) if fields else out


def tr(text: str, /, **fields) -> str:
    """`text` in the current language, formatted with `fields` (no fields: no formatting)."""
    out = catalog(lang()).get((None, text), text)
    return _format(out if isinstance(out, str) else text, fields)


def trc(context: str, text: str, /, **fields) -> str:
    """`tr` of a short text that means different things in different places: the translator
    sees `context` (gettext's msgctxt), e.g. trc("graph", "node") and trc("cluster", "node")."""
    out = catalog(lang()).get((context, text), text)
    return _format(out if isinstance(out, str) else text, fields)


def trn(singular: str, plural: str, n: int, /, **fields) -> str:
    """The singular or plural of a message for the number `n` (formatted with n= and `fields`),
    by the language's plural rule (Chinese has one form: ``nplurals=1``)."""
    cat = catalog(lang())
    forms = cat.get((None, singular))
    if isinstance(forms, list):
        out = forms[min(cat.plural(n), len(forms) - 1)]
    else:
        out = singular if n == 1 else plural
    return out.format(n=n, **fields)


def N_(text: str) -> str:
    """`text` unchanged: marks a key that is translated later, where it is shown (a table's
    header, a widget's choice, a value in a dict of labels), so that extraction finds it."""
    return text


# a list in the learner's language: one message per separator, two fields each, so that a
# language picks its own mark (Chinese: "{a}；{b}", "{a}，{b}") and no message is a fragment
_JOINED = {", ": N_("{a}, {b}"), "; ": N_("{a}; {b}")}


def tr_join(items, sep: str = ", ") -> str:
    """`sep`.join(items) in the current language (`sep`: ", " or "; "): English unchanged."""
    items = [str(x) for x in items]
    out = items[0] if items else ""
    for item in items[1:]:
        out = tr(_JOINED[sep], a=out, b=item)
    return out


class ShownName(str):
    """A name that is also a program value (a dict key, an argument such as train(wrong=...)):
    equal to its English text everywhere a program reads it, and shown in the learner's language
    where it is formatted (an f-string's field, a Table cell): ShownName("no DP reduction").
    `str(name)` and `repr(name)` stay English. Extraction finds a literal ShownName("...") as a key."""
    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return format(tr(str(self)), spec)


def tr_fig(text: str, /, **fields) -> str:
    """`tr` for text drawn in a figure: in a language with its own script, matplotlib is set
    to draw it first (or `fonts.MissingFont` says which font to install)."""
    if lang() == "zh":
        from labkit.i18n.fonts import use_cjk
        use_cjk()
    return tr(text, **fields)
