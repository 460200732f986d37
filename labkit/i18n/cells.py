"""Translations of notebook cells: the file format, the checks, and applying one (pure: no torch).

One file per notebook or deck, ``i18n/<lang>/notebooks/<stem>.md`` or ``i18n/<lang>/slides/<stem>.md``:
a sequence of entries, each a marker line followed by the translated cell source::

    <!-- labkit-zh cell=<cell id> en=<first 12 hex of sha256 of the English cell source> -->
    ...the cell as it should read in Chinese...

The English source is ``"".join(cell["source"])`` of the committed notebook, hashed as UTF-8.
Trailing whitespace of an entry is not part of it. Every markdown cell has an entry; a code
cell has one only where its comments are translated, and its code without comments must equal
the English cell's token for token (`code_tokens`), except that a string literal on a line the
translation ends with the comment ``# 译文`` (`TEXT_MARK`) may be a translation of the English
literal: an f-string keeps exactly the English one's ``{...}`` fields (`same_code`).
"""
import hashlib
import io
import re
import tokenize
from dataclasses import dataclass

MARKER = re.compile(r"^<!-- labkit-(?P<lang>[a-z]+) cell=(?P<cell>\S+) en=(?P<en>[0-9a-f]{12}) -->[ \t]*$",
                    re.MULTILINE)


class TranslationError(ValueError):
    """A translation file that cannot be read, or an entry that cannot be applied."""


@dataclass
class Entry:
    cell: str            # the cell's nbformat id
    en: str              # first 12 hex digits of sha256 of the English source it translates
    text: str            # the translated source
    line: int            # line of its marker in the file (1-based)


def en_hash(source: str) -> str:
    """The `en=` of an entry: the first 12 hex digits of sha256 of the English source."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def parse(text: str, lang: str, where: str = "translation") -> dict:
    """cell id -> Entry, in file order. Raises TranslationError on text before the first marker,
    a marker of another language, or a cell translated twice."""
    entries, marks = {}, list(MARKER.finditer(text))
    head = text[: marks[0].start()] if marks else text
    if head.strip():
        raise TranslationError(f"{where}: text before the first '<!-- labkit-{lang} cell=... -->' "
                               "marker line (every line belongs to an entry)")
    for i, m in enumerate(marks):
        line = text.count("\n", 0, m.start()) + 1
        if m["lang"] != lang:
            raise TranslationError(f"{where}, line {line}: a labkit-{m['lang']} marker in the "
                                   f"{lang} translation")
        if m["cell"] in entries:
            raise TranslationError(f"{where}, line {line}: cell {m['cell']} is translated twice "
                                   f"(first at line {entries[m['cell']].line})")
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end():end]
        body = body[1:] if body.startswith("\n") else body
        entries[m["cell"]] = Entry(m["cell"], m["en"], body.rstrip(), line)
    return entries


def render(entries, lang: str) -> str:
    """The file text of entries (Entry or (cell, en, text)), one blank line between them."""
    out = []
    for e in entries:
        cell, en, text = (e.cell, e.en, e.text) if isinstance(e, Entry) else e
        out.append(f"<!-- labkit-{lang} cell={cell} en={en} -->\n{text.rstrip()}\n")
    return "\n".join(out)


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
        if e.en != en_hash(cell.source):
            out.append(Problem(e.cell, "stale", f"translation is stale: update it (the English cell "
                               f"now begins '{first_line(cell.source)}'; en={en_hash(cell.source)})"))
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
