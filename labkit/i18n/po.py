"""The translation store: gettext .po files (pure: reads and writes files, starts no process).

    labkit/locale/labkit.pot                    the messages labkit prints and draws (template:
                                                `pybabel extract`, keywords KEYWORDS)
    labkit/locale/<lang>/LC_MESSAGES/labkit.po  their translation (msgid = the English text with
                                                its format fields; `tr`, `trn`, `trc`)
    i18n/templates/<folder>/<stem>.pot          the cells of notebooks/<stem>.ipynb or
                                                slides/<stem>.ipynb to translate
    i18n/<lang>/<folder>/<stem>.po              their translation: msgctxt = the cell's id,
                                                msgid = the English cell, msgstr = the cell in <lang>

Every file opens in Poedit, Weblate, Crowdin, Lokalize or a text editor. `python -m labkit.i18n
update` re-extracts the templates and merges them into every .po: a new message or cell comes
in untranslated, a changed one becomes ``#, fuzzy`` with its previous English (``#| msgid``),
which labkit does not use until a translator checks it and removes the flag; a removed one is
kept as ``#~`` (obsolete). Fuzzy and untranslated entries print and draw in English, and the
checks (tests/i18n/test_i18n.py, `python -m labkit.i18n check`) name them.
"""
import pathlib
import string

import polib

PKG = pathlib.Path(__file__).resolve().parents[1]          # labkit/
ROOT = PKG.parent                                          # the repository (notebooks/, slides/, i18n/)
LOCALE = PKG / "locale"
DOMAIN = "labkit"
MESSAGES_POT = LOCALE / f"{DOMAIN}.pot"
FOLDERS = ("notebooks", "slides")
# Babel's keyword specs: tr(text), tr_fig(text), N_(text) (a text translated later, where it is
# used: table headers, widget choices), trn(singular, plural, n), trc(context, text)
KEYWORDS = {"tr": None, "tr_fig": None, "N_": None, "trn": (1, 2), "trc": ((1, "c"), 2),
            "ShownName": None}     # labkit.i18n.ShownName("..."): a program value shown translated
PLURALS = {"zh": "nplurals=1; plural=0;"}
LANGUAGE_NAMES = {"zh": "Chinese (Simplified)"}
HEADER_COMMENT = ("# labkit's messages: what it prints and draws (tr, tr_fig, trn, trc, N_).\n"
                  "# Updated with `python -m labkit.i18n update` (Babel); see the README, Translations.")
CODE_COMMENT = "code cell: only comments may change (the code must stay token for token as in English)"
MARKDOWN_COMMENT = "markdown cell"


def messages_po(lang: str, locale: pathlib.Path = LOCALE) -> pathlib.Path:
    return locale / lang / "LC_MESSAGES" / f"{DOMAIN}.po"


def cells_po(nb_path, lang: str) -> pathlib.Path:
    """Where the translation of notebooks/<stem>.ipynb (or slides/...) lives."""
    nb_path = pathlib.Path(nb_path).resolve()
    return nb_path.parent.parent / "i18n" / lang / nb_path.parent.name / f"{nb_path.stem}.po"


def cells_pot(nb_path) -> pathlib.Path:
    nb_path = pathlib.Path(nb_path).resolve()
    return nb_path.parent.parent / "i18n" / "templates" / nb_path.parent.name / f"{nb_path.stem}.pot"


def header(lang: str = None, project: str = DOMAIN) -> dict:
    meta = {"Project-Id-Version": project, "Report-Msgid-Bugs-To": "",
            "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
            "Content-Transfer-Encoding": "8bit"}
    meta["PO-Revision-Date"] = "2026-12-02 00:00+0000"
    meta["Last-Translator"] = "labkit translators"
    meta["Language-Team"] = LANGUAGE_NAMES.get(lang, lang or "none")
    if lang:
        meta["Language"] = lang
        meta["Plural-Forms"] = PLURALS.get(lang, "nplurals=2; plural=(n != 1);")
    return meta


def fields_of(text: str) -> list:
    """The format fields of a message, in order (``"{rank} of {n:,}"`` -> ["rank", "n"])."""
    return [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]


# -- notebooks and decks -------------------------------------------------------------------
def wants_entry(cell) -> bool:
    """The cells a translation has: every markdown cell, and every code cell with a comment."""
    return cell.cell_type == "markdown" or (cell.cell_type == "code" and "#" in cell.source)


def cells_template(nb, where: str) -> polib.POFile:
    """The .pot of a notebook: one entry per cell to translate, in the notebook's order."""
    pot = polib.POFile(wrapwidth=0)
    pot.metadata = header(project=f"{DOMAIN} {where}")
    for cell in nb.cells:
        if wants_entry(cell):
            pot.append(polib.POEntry(
                msgctxt=cell.get("id"), msgid=cell.source, msgstr="",
                comment=CODE_COMMENT if cell.cell_type == "code" else MARKDOWN_COMMENT))
    return pot


def fit_ends(msgid: str, msgstr: str) -> str:
    """msgstr with the newline at its start and end that msgfmt --check wants where msgid has them
    (labkit strips the trailing one again when applying: trailing whitespace is not part of a cell)."""
    if not msgstr:
        return msgstr
    if msgid.startswith("\n") and not msgstr.startswith("\n"):
        msgstr = "\n" + msgstr
    if msgid.endswith("\n") and not msgstr.endswith("\n"):
        msgstr += "\n"
    return msgstr


def update_cells(po: polib.POFile, pot: polib.POFile, cell_ids) -> dict:
    """Merge a notebook's template into its translation, as `msgmerge --previous` does, matched by
    cell id (msgctxt): a cell whose English changed keeps its translation as a fuzzy entry with
    the English it translated (``#| msgid``); a cell gone becomes obsolete (``#~``); a new cell
    comes in untranslated. A translated code cell without a comment (not in the template) is kept
    while the cell exists. Returns counts {"new", "fuzzy", "obsolete"}."""
    counts = {"new": 0, "fuzzy": 0, "obsolete": 0}
    old = {e.msgctxt: e for e in po}
    out = []
    for t in pot:
        e = old.pop(t.msgctxt, None)
        if e is None:
            e = polib.POEntry(msgctxt=t.msgctxt, msgid=t.msgid, msgstr="")
            counts["new"] += 1
        elif e.obsolete or e.msgid != t.msgid:
            if e.msgstr and "fuzzy" not in e.flags:
                e.flags.append("fuzzy")
                counts["fuzzy"] += 1
            if e.msgid != t.msgid:
                e.previous_msgid = e.previous_msgid or e.msgid
                e.previous_msgctxt = None
                e.msgid = t.msgid
            e.obsolete = False
        e.comment = t.comment
        out.append(e)
    cell_ids = set(cell_ids)
    for e in old.values():                         # translated code cells without a comment
        if not e.obsolete and e.msgctxt in cell_ids and e.msgstr:
            out.append(e)
        else:
            if not e.obsolete:
                counts["obsolete"] += 1
            e.obsolete = True
            out.append(e)
    po[:] = sorted(out, key=lambda e: e.obsolete)
    return counts


def new_po(lang: str, where: str) -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.metadata = header(lang, project=f"{DOMAIN} {where}")
    return po


def read(path) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=0)


def save(po: polib.POFile, path) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    po.wrapwidth = 0
    text = str(po)
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text, encoding="utf-8")


# -- the messages' catalogs: Babel's merge, read and write (extraction: labkit/i18n/extract.py)
def merge_messages(cat, pot) -> None:
    """Babel's update of a language's catalog from the template, as msgmerge --previous: a
    message whose English changed becomes fuzzy with its previous English (``#| msgid``), a new
    one comes in untranslated, a removed one obsolete (``#~``). Fuzzy means "the English of this
    translation changed": a new message that Babel matched to one still in use is a guess, not a
    change, so it comes in untranslated instead."""
    cat.update(pot, no_fuzzy_matching=False, update_header_comment=False, keep_user_comments=True,
               update_creation_date=False)
    live = {m.id if isinstance(m.id, str) else m.id[0] for m in pot if m.id}
    for m in cat:
        prev = m.previous_id[0] if m.previous_id else None
        if m.id and m.fuzzy and prev in live:
            m.string = ("",) * len(m.string) if isinstance(m.string, tuple) else ""
            m.flags.discard("fuzzy")
            m.previous_id = []


def write_catalog(cat, path, omit_header=False) -> None:
    from babel.messages.pofile import write_po
    for m in cat:                       # labkit's messages are str.format()ed, never %-formatted
        m.flags.discard("python-format")
    cat.header_comment = HEADER_COMMENT
    cat.project, cat.version, cat.msgid_bugs_address = DOMAIN, "", ""
    cat.last_translator = "labkit translators"
    if cat.locale is not None:
        cat.language_team = LANGUAGE_NAMES.get(str(cat.locale), str(cat.locale))
    if isinstance(cat.revision_date, str) or cat.revision_date is None:
        cat.revision_date = cat.creation_date
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f, _previous_unwrapped():
        write_po(f, cat, width=0, include_previous=True, sort_output=False, omit_header=omit_header,
                 include_lineno=False)


class _PreviousWrapper:
    """Babel wraps every comment at 76 columns, the previous English (``#| msgid "..."``) too, which
    splits it into lines msgfmt and polib cannot read: keep that one whole, one line per line."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, *args, **kw):
        wrapper = self.inner(*args, **kw)
        wrap = wrapper.wrap
        wrapper.wrap = lambda text: text.split("\n") if text.startswith(("msgid ", "msgid_plural ")) else wrap(text)
        return wrapper


def _previous_unwrapped():
    import contextlib
    from babel.messages import pofile

    @contextlib.contextmanager
    def patched():
        inner = pofile.TextWrapper
        pofile.TextWrapper = _PreviousWrapper(inner)
        try:
            yield
        finally:
            pofile.TextWrapper = inner
    return patched()


def read_catalog(path, lang=None):
    from babel.messages.pofile import read_po
    with open(path, "rb") as f:
        return read_po(f, locale=lang, abort_invalid=True)
