"""Translations of notebook cells: reading one, the checks, and applying it (pure: no torch).

One gettext file per notebook or deck, ``i18n/<lang>/notebooks/<stem>.po`` or
``i18n/<lang>/slides/<stem>.po`` (labkit.i18n.po): one entry per cell, msgctxt = the cell's
nbformat id, msgid = the English cell source (``"".join(cell["source"])``), msgstr = the cell
as it should read in that language. Trailing whitespace of a translation is not part of it.
Every markdown cell has an entry; a code cell has one where it has comments (translator comment
"code cell: only comments may change"), and its code without comments must equal the English
cell's token for token (`code_tokens`), except that a string literal on a line the translation
ends with the comment ``# 译文`` (`TEXT_MARK`) may be a translation of the English literal: an
f-string keeps exactly the English one's ``{...}`` fields (`same_code`). An entry whose msgid is not the cell's English today,
or that is marked fuzzy (its English changed: `python -m labkit.i18n update` keeps the English
it translated as ``#| msgid``), is stale: the cell stays in English until a translator checks it.
"""
import io
import re
import tokenize
from dataclasses import dataclass


class TranslationError(ValueError):
    """A translation file that cannot be read, or an entry that cannot be applied."""


@dataclass
class Entry:
    cell: str            # the cell's nbformat id (msgctxt)
    en: str              # the English source it translates (msgid)
    text: str            # the translated source (msgstr, trailing whitespace stripped)
    line: int            # line of the entry in the file (1-based)
    fuzzy: bool = False  # marked fuzzy: its English changed since it was translated


def parse(text: str, lang: str = None, where: str = "translation") -> dict:
    """cell id -> Entry of a .po file's text (or path), in file order: the translated entries,
    not obsolete. Raises TranslationError on a file polib cannot read, an entry without a cell
    id (msgctxt), or a cell translated twice."""
    import polib
    try:
        po = polib.pofile(text, wrapwidth=0)
    except (OSError, ValueError) as exc:
        raise TranslationError(f"{where}: not a .po file polib can read: {exc}") from None
    if lang and po.metadata.get("Language", lang).split("_")[0] != lang.split("_")[0]:
        raise TranslationError(f"{where}: a Language: {po.metadata['Language']} file in the {lang} "
                               "translation")
    entries = {}
    for e in po:
        if e.obsolete or not e.msgstr:
            continue
        if not e.msgctxt:
            raise TranslationError(f"{where}, line {e.linenum}: an entry without msgctxt (the cell id)")
        if e.msgctxt in entries:
            raise TranslationError(f"{where}, line {e.linenum}: cell {e.msgctxt} is translated twice "
                                   f"(first at line {entries[e.msgctxt].line})")
        entries[e.msgctxt] = Entry(e.msgctxt, e.msgid, e.msgstr.rstrip(), e.linenum, "fuzzy" in e.flags)
    return entries


def render(entries, lang: str) -> str:
    """The .po text of entries (Entry or (cell, English, text)), for tests and new files."""
    import polib
    from labkit.i18n import po as P
    po = P.new_po(lang, "cells")
    for e in entries:
        cell, en, text, fuzzy = (e.cell, e.en, e.text, e.fuzzy) if isinstance(e, Entry) else (*e, False)
        po.append(polib.POEntry(msgctxt=cell, msgid=en, msgstr=P.fit_ends(en, text),
                                flags=["fuzzy"] if fuzzy else []))
    return str(po) + "\n"


_MAGIC = re.compile(r"^([ \t]*)([%!].*)$")


def code_tokens(source: str) -> list:
    """The cell's tokens without its comments: (type, string) pairs, comments and blank-line
    tokens dropped. IPython lines (``%%ranks``, ``%load_ext``, ``!cmd``) count as one token
    each. Two cells with the same code_tokens differ only in comments and blank lines."""
    lines = [(_MAGIC.sub(lambda m: m[1] + "__magic__(" + repr(m[2].rstrip()) + ")", ln)
              if _MAGIC.match(ln) else ln) for ln in source.splitlines()]
    toks = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
    try:
        return [(t.type, t.string) for t in toks
                if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING)]
    except (tokenize.TokenError, SyntaxError, IndentationError) as exc:
        raise TranslationError(f"cannot read the code: {exc}") from None


TEXT_MARK = "# 译文"     # a translated line's comment: its string literals are translated text
_FIELDS = re.compile(r"(?<!\{)\{([^{}]*)\}")


def _marked_lines(source: str) -> set:
    """The (1-based) lines whose comment is `TEXT_MARK`."""
    out = set()
    toks = tokenize.generate_tokens(io.StringIO(_magicless(source) + "\n").readline)
    try:
        for t in toks:
            if t.type == tokenize.COMMENT and t.string.strip() == TEXT_MARK:
                out.add(t.start[0])
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return out


def _prefix(lit: str) -> str:
    return re.match(r"[A-Za-z]*", lit)[0].lower()


def _same_text_literal(a: str, b: str) -> bool:
    """b may stand for a: both string literals of the same kind, the same f-string fields."""
    if _prefix(a) != _prefix(b):
        return False
    if "f" in _prefix(a):
        return sorted(_FIELDS.findall(a)) == sorted(_FIELDS.findall(b))
    return True


def same_code(en: str, zh: str) -> bool:
    """True when zh runs en's code: the same `code_tokens`, but a string literal on a line of zh
    marked `TEXT_MARK` may differ (same kind of literal, same f-string fields)."""
    a, b = code_tokens(en), code_tokens(zh)
    if a == b:
        return True
    if len(a) != len(b):
        return False
    marked = _marked_lines(zh)
    if not marked:
        return False
    starts = _string_lines(zh)
    for (ta, sa), (tb, sb), line in zip(a, b, starts):
        if (ta, sa) == (tb, sb):
            continue
        if not (ta == tb == tokenize.STRING and line in marked and _same_text_literal(sa, sb)):
            return False
    return True


def _magicless(source: str) -> str:
    return "\n".join(_MAGIC.sub(lambda m: m[1] + "__magic__(" + repr(m[2].rstrip()) + ")", ln)
                     if _MAGIC.match(ln) else ln for ln in source.splitlines())


def _string_lines(source: str) -> list:
    """The line of each token of `code_tokens(source)`, in the same order."""
    toks = tokenize.generate_tokens(io.StringIO(_magicless(source) + "\n").readline)
    return [t.start[0] for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING)]


def code_difference(en: str, zh: str):
    """None when the two cells differ only in comments (and in the string literals of lines
    marked `TEXT_MARK`, `same_code`), else the first differing line of zh."""
    try:
        if same_code(en, zh):
            return None
    except TranslationError as exc:
        return str(exc)
    for la, lb in zip(_code_lines(en), _code_lines(zh)):
        if la != lb:
            return f"'{lb}' where the English has '{la}'"
    return "the code has lines added or removed"


def _code_lines(source: str) -> list:
    out = []
    for ln in source.splitlines():
        s = re.sub(r"(^|\s+)#.*$", "", ln).strip()     # roughly: only for the message
        if s:
            out.append(s)
    return out


def first_line(source: str) -> str:
    return next((ln.strip() for ln in source.splitlines() if ln.strip()), "(empty cell)")


@dataclass
class Problem:
    cell: str
    kind: str            # "unknown cell", "stale", "code differs", "missing"
    text: str

    def __str__(self) -> str:
        return f"cell {self.cell}: {self.text}"


def problems(nb, entries: dict) -> list:
    """Everything wrong with a translation of `nb` (an nbformat notebook): entries naming no
    cell, stale entries (the English changed since), code entries whose code differs, and
    markdown cells without an entry."""
    cells = {c.get("id"): c for c in nb.cells}
    out = []
    for e in entries.values():
        cell = cells.get(e.cell)
        if cell is None:
            out.append(Problem(e.cell, "unknown cell", f"no cell has this id (entry at line {e.line})"))
            continue
        if e.en != cell.source or e.fuzzy:
            why = "marked fuzzy" if e.en == cell.source else "its msgid is not the English cell"
            out.append(Problem(e.cell, "stale", f"translation is stale ({why}): update it (the "
                               f"English cell now begins '{first_line(cell.source)}'; `python -m "
                               "labkit.i18n update`, then translate and remove the fuzzy flag)"))
        elif cell.cell_type == "code":
            diff = code_difference(cell.source, e.text)
            if diff:
                out.append(Problem(e.cell, "code differs", "a code entry may change only comments: "
                                   + diff))
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.get("id") not in entries:
            out.append(Problem(cell.get("id"), "missing", "markdown cell has no translation "
                               f"(it begins '{first_line(cell.source)}')"))
    return out


def translate(nb, entries: dict) -> tuple:
    """(a copy of nb with every sound entry applied, problems). A cell whose entry is stale,
    or whose code would change, keeps its English source (the problems say which)."""
    import copy
    nb = copy.deepcopy(nb)
    found = problems(nb, entries)
    bad = {p.cell for p in found if p.kind != "missing"}
    for cell in nb.cells:
        e = entries.get(cell.get("id"))
        if e is not None and cell.get("id") not in bad:
            cell.source = e.text
    return nb, found
