"""Finding labkit's messages (pure: reads files, starts no process): Babel's extraction from the
package, from the code cells of the notebooks and decks and from examples/ (the keywords of
labkit.i18n.po.KEYWORDS, and the literal texts of tables and verdicts), the lists of messages
extraction cannot see (i18n/unextracted.txt) and of sentence fragments (i18n/fragments.txt), and
the calls whose key is computed. `python -m labkit.i18n update` writes what `extract_messages`
returns into labkit/locale/labkit.pot and merges it (labkit.i18n.po.merge_messages).
"""
import pathlib

from labkit.i18n.po import DOMAIN, FOLDERS, KEYWORDS, PKG, ROOT

UNEXTRACTED = ROOT / "i18n" / "unextracted.txt"
FRAGMENTS = ROOT / "i18n" / "fragments.txt"
UNEXTRACTED_COMMENT = ("not found by extraction: it reaches tr() through a variable; mark it with N_() "
                       "where it is written (i18n/unextracted.txt)")


def listed(path) -> list:
    """The messages of a list file (i18n/unextracted.txt, i18n/fragments.txt): one a line, as a
    Python string literal; lines starting with # are comments."""
    import ast
    path = pathlib.Path(path)
    if not path.exists():
        return []
    return [ast.literal_eval(ln) for ln in path.read_text(encoding="utf-8").splitlines()
            if ln.strip() and not ln.startswith("#")]


def notebook_sources(root: pathlib.Path):
    """(where, code) of every code cell of the notebooks and decks, IPython lines blanked, and of
    every script in examples/ (run from a notebook cell, they print in the learner's language)."""
    import json
    for path in sorted((root / "examples").glob("*.py")):
        yield f"examples/{path.name}", path.read_text(encoding="utf-8")
    for folder in FOLDERS:
        for path in sorted((root / folder).glob("*.ipynb")):
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
                if cell["cell_type"] == "code":
                    src = "".join(cell["source"])
                    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                                      for ln in src.splitlines())
                    yield f"{folder}/{path.name}", code


# Calls whose arguments labkit translates where it shows them (labkit.tables.Table: the header,
# title= and notes=), so their string literals are messages as tr()'s are
TABLE_CALLS = ("Table", "table")


def table_texts(code: str) -> list:
    """[(line, text)]: the literal header names, title= and notes= of the TABLE_CALLS in `code`."""
    import ast
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    out = []

    def strings(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):     # ["..."] + [f"rank {r}" ...]
            return header(node.left) + header(node.right)
        return []

    def header(node):
        return strings(node) if isinstance(node, (ast.List, ast.Tuple, ast.BinOp)) else []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in TABLE_CALLS:
            found = header(node.args[0]) if node.args else []
            for kw in node.keywords:
                if kw.arg in ("title", "notes"):
                    found += strings(kw.value)
            out += [(n.lineno, n.value) for n in found if n.value.strip()]
    return out


TABLE_COMMENT = "a table's header, title or note (labkit.tables.Table translates it where it is shown)"
# Calls in notebook and deck code cells that translate their second argument where they show it,
# when it is a string literal (an f-string is translated in the cell's translation instead):
# labkit.verdict.verdict(ok, "text") and labkit.show.before_after(results, "title")
TEXT_CALLS = ("verdict", "before_after", "before_after_figure")
TEXT_COMMENT = "a code cell's verdict(ok, ...) text or before_after(..., title) (translated where it is shown)"


def call_texts(code: str) -> list:
    """[(line, text)]: the literal second arguments of the TEXT_CALLS in `code`."""
    import ast
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [(node.lineno, node.args[1].value) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and len(node.args) > 1
            and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in TEXT_CALLS
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and node.args[1].value.strip()]


def extract_messages(package: pathlib.Path = PKG, root: pathlib.Path = ROOT, listed_too: bool = True,
                     tables: bool = True):
    """The messages template as Babel's extraction finds them in the package and in the code
    cells of the notebooks and decks (KEYWORDS; and the literal headers, titles and notes of
    tables, TABLE_CALLS), plus, with listed_too, those of
    i18n/unextracted.txt (not visible to extraction yet, so not to be marked obsolete)."""
    import io
    from babel.messages.catalog import Catalog
    from babel.messages.extract import extract_from_dir, extract_python
    cat = Catalog(project=DOMAIN, charset="utf-8", fuzzy=False)
    for filename, lineno, message, comments, context in extract_from_dir(
            str(package), method_map=[("**/i18n/messages.py", "python"), ("**/i18n/**.py", "ignore"), ("**.py", "python")],
            keywords=KEYWORDS, comment_tags=("i18n:",), strip_comment_tags=True):
        cat.add(message, None, [(f"labkit/{filename}", lineno)], auto_comments=comments,
                context=context)
    for path in sorted(package.rglob("*.py")) if tables else ():
        if "/i18n/" not in str(path):
            for lineno, text in table_texts(path.read_text(encoding="utf-8")):
                _add_table_text(cat, text, str(path.relative_to(package.parent)), lineno)
    for where, code in notebook_sources(root):
        for lineno, text in table_texts(code) if tables else ():
            _add_table_text(cat, text, where, lineno)
        for lineno, text in call_texts(code):
            _add_table_text(cat, text, where, lineno, TEXT_COMMENT)
        try:
            found = list(extract_python(io.BytesIO(code.encode("utf-8")), KEYWORDS, ("i18n:",),
                                        {"encoding": "utf-8"}))
        except SyntaxError:
            continue
        from babel.messages.extract import _match_messages_against_spec
        for lineno, funcname, messages, comments in found:
            spec = KEYWORDS[funcname] or (1,)
            if not isinstance(messages, (list, tuple)):
                messages = [messages]
            m = _match_messages_against_spec(lineno, list(messages), comments, io.BytesIO(), spec)
            if m:
                cat.add(m[1], None, [(where, 0)], auto_comments=comments, context=m[3])
    if listed_too:
        for key in listed(UNEXTRACTED):
            if key not in cat:
                cat.add(key, None, [], auto_comments=[UNEXTRACTED_COMMENT])
    return cat


def _add_table_text(cat, text, where, lineno, comment=TABLE_COMMENT):
    m = cat.get(text)
    if m is None:
        cat.add(text, None, [(where, lineno)], auto_comments=[comment])
    else:
        m.locations.append((where, lineno))


def computed_keys(package: pathlib.Path = PKG) -> list:
    """Calls of tr, tr_fig, trn, trc or N_ whose key is computed (an expression, a call, an
    f-string: neither a string literal nor a variable), so no extraction can see it:
    [(file, line, source text)]."""
    import ast
    out = []
    for path in sorted(package.rglob("*.py")):
        if "/i18n/" in str(path):
            continue
        src = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in KEYWORDS:
                continue
            spec = KEYWORDS[name] or (1,)
            idx = [i[0] if isinstance(i, tuple) else i for i in spec]
            args = node.args
            # a literal, or a variable holding one that is marked N_() where it is written;
            # anything else (an expression, a call, an f-string) computes the key
            if any(len(args) < i or isinstance(args[i - 1], ast.Constant) and not isinstance(args[i - 1].value, str)
                   or not isinstance(args[i - 1], (ast.Constant, ast.Name, ast.Attribute, ast.Subscript))
                   for i in idx):
                out.append((str(path.relative_to(package.parent)), node.lineno,
                            ast.get_source_segment(src, node) or name))
    return out


def is_fragment(msgid: str) -> bool:
    """A piece of a sentence: begins or ends with whitespace, or begins with a punctuation mark
    (", while ...", " at {at}", "; ..."; an ellipsis, "... {n:,} bytes not shown", begins a
    sentence), or opens a bracket it does not close."""
    import re
    return (msgid != msgid.strip() or bool(re.match(r"^[,;:.)（]", msgid) and not msgid.startswith("... "))
            or (msgid[:1] == "(" and msgid[-1:] != ")"))
