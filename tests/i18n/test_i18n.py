"""The Chinese edition kept in step with the English, in gettext .po files (pure: reads files,
starts no process but msgfmt).

For every notebook or deck translation (i18n/zh/<folder>/<stem>.po, msgctxt = cell id): each
entry names a cell that exists and translates its current English text (its msgid is the cell,
not fuzzy: else "translation is stale: update it"), every markdown cell has an entry, and code
entries differ from the English only in comments. i18n/zh/untranslated.txt lists the notebooks
and decks without a file yet, and must shrink as files land. Every catalog message keeps the
format fields of its English key. Babel's extraction finds every key (or i18n/unextracted.txt
lists it, and only shrinks), no key is computed, no new message is a fragment of a sentence,
the templates are current, polib opens every file and `msgfmt --check` accepts it.
"""
import collections
import functools
import os
import pathlib
import shutil
import subprocess

import nbformat
import polib
import pytest

from labkit.i18n import cells, extract as E, po as P
from labkit.i18n.cells import TranslationError, code_difference, parse, problems, render
from labkit.i18n.messages import fields_of, messages

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ("notebooks", "slides")
SOURCES = {f"{d}/{p.stem}": p for d in FOLDERS for p in sorted((ROOT / d).glob("*.ipynb"))}
FILES = {f"{d}/{p.stem}": p for d in FOLDERS for p in sorted((ROOT / "i18n" / "zh" / d).glob("*.po"))}
UNTRANSLATED = ROOT / "i18n" / "zh" / "untranslated.txt"
MESSAGES_PO = ROOT / "labkit" / "locale" / "zh" / "LC_MESSAGES" / "labkit.po"
ALL_PO = [MESSAGES_PO, *FILES.values()]
MESSAGES = messages("zh")


@functools.lru_cache(maxsize=None)
def extracted(listed_too=True, tables=True) -> frozenset:
    """(context, msgid) of what Babel's extraction finds (cached: 2 s each)."""
    return frozenset((m.context, m.id if isinstance(m.id, str) else m.id[0])
                     for m in E.extract_messages(listed_too=listed_too, tables=tables) if m.id)


def extracted_ids(**kw) -> set:
    return {i for _, i in extracted(**kw)}


def untranslated() -> list:
    lines = UNTRANSLATED.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _problems(name: str, kinds) -> list:
    nb = nbformat.read(SOURCES[name], as_version=4)
    entries = parse(FILES[name].read_text(encoding="utf-8"), "zh", where=str(FILES[name]))
    return [f"{name}.ipynb {p}" for p in problems(nb, entries) if p.kind in kinds]


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_entry_translates_the_current_english(name):
    assert name in SOURCES, f"i18n/zh/{name}.po translates {name}.ipynb, which does not exist"
    bad = _problems(name, ("unknown cell", "stale"))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_markdown_cell_is_translated(name):
    bad = _problems(name, ("missing",))
    assert not bad, f"{len(bad)} markdown cells without a translation:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(FILES))
def test_code_entries_change_only_comments(name):
    bad = _problems(name, ("code differs",))
    assert not bad, "\n".join(bad)


def test_the_untranslated_list_shrinks_honestly():
    listed = untranslated()
    dup = [n for n, k in collections.Counter(listed).items() if k > 1]
    assert not dup, f"listed twice in {UNTRANSLATED.name}: {dup}"
    done = sorted(set(listed) & set(FILES))
    assert not done, (f"now translated, so delete their lines from i18n/zh/untranslated.txt: {done}")
    unknown = sorted(set(listed) - set(SOURCES))
    assert not unknown, f"i18n/zh/untranslated.txt names notebooks that do not exist: {unknown}"
    forgotten = sorted(set(SOURCES) - set(FILES) - set(listed))
    assert not forgotten, (f"neither translated nor listed in i18n/zh/untranslated.txt: {forgotten}")


def test_catalog_messages_keep_their_format_fields():
    bad = [(en, sorted(fields_of(en)), sorted(fields_of(t)))
           for en, t in MESSAGES.items() if sorted(fields_of(en)) != sorted(fields_of(t))]
    assert not bad, "\n".join(f"{en!r}: fields {a} in English, {b} in Chinese" for en, a, b in bad)


def test_catalog_keeps_the_words_programs_read():
    import re
    for en, text in MESSAGES.items():
        for word in ("FAIL", "MISS:", "ok:"):          # as a word: "notebook:" holds no "ok:"
            has = re.compile(r"(?<![A-Za-z])" + re.escape(word)).search
            assert bool(has(en)) == bool(has(text)), f"{en!r}: '{word}' must stay as it is"


def test_no_message_is_fuzzy_or_untranslated():
    # every tr()/tr_fig()/N_() message has its Chinese; a table's header, title or note found in a
    # notebook (TABLE_CALLS) may still be untranslated: `python -m labkit.i18n check` lists them
    keyword = extracted_ids(tables=False)
    bad = [e.msgid[:80] for e in polib.pofile(str(MESSAGES_PO)) if not e.obsolete
           and ("fuzzy" in e.flags or (not e.translated() and e.msgid in keyword))]
    assert not bad, (f"{len(bad)} messages of {MESSAGES_PO.relative_to(ROOT)} untranslated or fuzzy "
                     "(translate them, remove the fuzzy flag):\n" + "\n".join(map(repr, bad)))


# -- the files: polib, msgfmt, the templates -------------------------------------------------
@pytest.mark.parametrize("path", ALL_PO, ids=lambda p: str(p.relative_to(ROOT)))
def test_polib_opens_every_po_file(path):
    po = polib.pofile(str(path))
    assert po.metadata.get("Language") == "zh" and "nplurals=1" in po.metadata.get("Plural-Forms", "")
    assert po.percent_translated() > 0, f"{path}: nothing translated"


def test_msgfmt_check_accepts_every_po_file(tmp_path):
    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        assert not os.environ.get("CI"), "msgfmt (Debian's gettext) is missing in CI: .ci/run installs it"
        pytest.skip("msgfmt not installed here (Debian/Ubuntu: apt-get install gettext)")
    bad = []
    for path in ALL_PO:
        r = subprocess.run([msgfmt, "--check", "-o", str(tmp_path / "x.mo"), str(path)],
                           capture_output=True, text=True)
        if r.returncode:
            bad.append(f"{path.relative_to(ROOT)}:\n{r.stderr}")
    assert not bad, "msgfmt --check refuses:\n" + "\n".join(bad)


def test_the_templates_are_current():
    pot = set(extracted())
    have = {(e.msgctxt, e.msgid) for e in polib.pofile(str(P.MESSAGES_POT))}
    assert pot == have, (f"{P.MESSAGES_POT.relative_to(ROOT)} is not what extraction finds "
                         f"({len(pot - have)} new, {len(have - pot)} gone): run python -m labkit.i18n update")
    for name, src in SOURCES.items():
        nb = nbformat.read(src, as_version=4)
        want = [(e.msgctxt, e.msgid) for e in P.cells_template(nb, name)]
        path = P.cells_pot(src)
        assert path.exists() and [(e.msgctxt, e.msgid) for e in polib.pofile(str(path))] == want, \
            f"{path.relative_to(ROOT)} is not {name}.ipynb's cells: run python -m labkit.i18n update"


def test_babel_extraction_finds_every_key():
    found = extracted_ids(listed_too=False)
    listed = E.listed(E.UNEXTRACTED)
    hidden = sorted(k for k in MESSAGES if k not in found and k not in listed)
    assert not hidden, ("messages of the catalog that extraction cannot find (passed to tr() through a "
                        "variable: mark them with N_() where they are written):\n" + "\n".join(map(repr, hidden)))
    now_found = [k for k in listed if k in found]
    assert not now_found, ("found by extraction now, so delete their lines from i18n/unextracted.txt:\n"
                           + "\n".join(map(repr, now_found)))
    gone = [k for k in listed if k not in MESSAGES]
    assert not gone, "i18n/unextracted.txt lists messages the catalog does not have:\n" + "\n".join(map(repr, gone))


def test_no_key_is_computed():
    bad = E.computed_keys()
    assert not bad, ("keys built at run time, which no extraction can find (write each message as "
                     "a literal, or a variable holding one marked N_()):\n"
                     + "\n".join(f"{f}:{line}: {src}" for f, line, src in bad))


def test_no_new_message_is_a_fragment():
    listed = E.listed(E.FRAGMENTS)
    found = extracted_ids(listed_too=False)
    new = sorted(k for k in set(MESSAGES) | found if E.is_fragment(k) and k not in listed)
    assert not new, ("pieces of a sentence joined in code: write the whole sentence as one message "
                     "(a translator reorders it):\n" + "\n".join(map(repr, new)))
    gone = [k for k in listed if k not in MESSAGES]
    assert not gone, "no longer messages, so delete their lines from i18n/fragments.txt:\n" + "\n".join(map(repr, gone))


# -- a changed English message or cell becomes fuzzy, with its previous text ------------------
def test_a_changed_cell_becomes_fuzzy_with_its_previous_english(tmp_path):
    nb = _nb(("md", MD), ("code", CODE), ("md", "## Gone\n"))
    po = polib.pofile(render([("c0", MD, "# 标题\n\n一些*文字*。"), ("c2", "## Gone\n", "## 没了")], "zh"), wrapwidth=0)
    nb.cells[0].source = "# Title\n\nSome *changed* text."
    del nb.cells[2]
    counts = P.update_cells(po, P.cells_template(nb, "t"), [c.id for c in nb.cells])
    assert counts == {"new": 1, "fuzzy": 1, "obsolete": 1}
    e = {x.msgctxt: x for x in po}
    assert "fuzzy" in e["c0"].flags and e["c0"].previous_msgid == MD and e["c0"].msgstr.startswith("# 标题")
    assert e["c0"].msgid == nb.cells[0].source and e["c2"].obsolete and e["c1"].msgstr == ""
    assert "#| msgid" in str(po) and "#~ msgctxt" in str(po) and P.CODE_COMMENT in str(po)
    out, found = cells.translate(nb, parse(str(po), "zh"))      # fuzzy: kept in English, and said
    assert out.cells[0].source == nb.cells[0].source
    assert [(p.cell, p.kind) for p in found] == [("c0", "stale")] and "marked fuzzy" in found[0].text


def test_a_changed_message_becomes_fuzzy_with_its_previous_english(tmp_path, monkeypatch):
    from babel.messages.catalog import Catalog
    from labkit.i18n import messages as M
    cat = Catalog(locale="zh", project="labkit")
    cat.add("rank {rank} died", "rank {rank} 死了")
    cat.add("hello", "你好")
    pot = Catalog(project="labkit")
    pot.add("rank {rank} has died")
    pot.add("hello")
    pot.add("hello there")                                     # new, close to one still in use
    P.merge_messages(cat, pot)                                 # what python -m labkit.i18n update does
    assert cat.get("hello there").string == "" and not cat.get("hello there").fuzzy   # no guess
    P.write_catalog(cat, tmp_path / "labkit.po")
    text = (tmp_path / "labkit.po").read_text(encoding="utf-8")
    assert '#, fuzzy, python-brace-format\n#| msgid "rank {rank} died"\nmsgid "rank {rank} has died"' in text
    got = M.load("zh", tmp_path / "labkit.po")
    assert got.get_text("hello") == "你好" and got.get_text("rank {rank} has died") == "rank {rank} has died"
    if shutil.which("msgmerge"):                                # GNU gettext says the same
        (tmp_path / "t.pot").write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                                        'msgid "rank {rank} has died"\nmsgstr ""\n', encoding="utf-8")
        old = tmp_path / "old.po"
        old.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                       'msgid "rank {rank} died"\nmsgstr "rank {rank} 死了"\n', encoding="utf-8")
        r = subprocess.run(["msgmerge", "--previous", "-q", str(old), str(tmp_path / "t.pot")],
                           capture_output=True, text=True, check=True)
        assert "#, fuzzy" in r.stdout and '#| msgid "rank {rank} died"' in r.stdout


def test_a_long_changed_message_keeps_its_previous_english_readable(tmp_path):
    # Babel wraps comments at 76 columns, the previous English (#| msgid) too, into lines that
    # neither polib nor msgfmt can read; write_catalog keeps it whole, one #| line per line
    from babel.messages.catalog import Catalog
    long_old = "{n} GPUs = dp {dp} x pp {pp} x tp {tp}{extra} on {nodes} node(s) of {g}; order {order} (fastest first)"
    lines_old = "first line of a message\nand its second line, long enough to pass the seventy-six columns mark"
    cat = Catalog(locale="zh", project="labkit")
    cat.add(long_old, "{n} 卡 = dp {dp} x pp {pp} x tp {tp}{extra}")
    cat.add(lines_old, "第一行\n第二行")
    pot = Catalog(project="labkit")
    pot.add("{n} GPUs = {layout} on {nodes} node(s) of {g}; order {order} (fastest first)")
    pot.add("first line of a message\nand its second line, long enough to pass the seventy-six columns mark!")
    P.merge_messages(cat, pot)
    P.write_catalog(cat, tmp_path / "labkit.po")
    got = {e.msgid: e for e in polib.pofile(str(tmp_path / "labkit.po"))}
    assert [(e.previous_msgid, "fuzzy" in e.flags) for e in got.values()] == [(long_old, True), (lines_old, True)]
    if shutil.which("msgfmt"):
        r = subprocess.run(["msgfmt", "--check", "-o", os.devnull, str(tmp_path / "labkit.po")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_plural_and_context(monkeypatch, tmp_path):
    from labkit.i18n import messages as M
    po = P.new_po("zh", "t")
    po.append(polib.POEntry(msgid="{n} rank", msgid_plural="{n} ranks", msgstr_plural={0: "{n} 个 rank"}))
    po.append(polib.POEntry(msgctxt="graph", msgid="node", msgstr="结点"))
    P.save(po, tmp_path / "labkit.po")
    monkeypatch.setitem(M._catalogs, "zh", M.load("zh", tmp_path / "labkit.po"))
    monkeypatch.setenv("LABKIT_LANG", "zh")
    assert M.trn("{n} rank", "{n} ranks", 3) == "3 个 rank" and M.trc("graph", "node") == "结点"
    assert M.trc("cluster", "node") == "node" and M.N_("node") == "node"
    monkeypatch.setenv("LABKIT_LANG", "en")
    assert M.trn("{n} rank", "{n} ranks", 1) == "1 rank" and M.trn("{n} rank", "{n} ranks", 2) == "2 ranks"


def test_traditional_chinese_is_not_given_simplified_silently(monkeypatch, capsys):
    import importlib
    L = importlib.import_module("labkit.i18n.lang")
    monkeypatch.setattr(L, "_said", set())
    for value, want in (("zh", "zh"), ("zh_CN", "zh"), ("zh-CN.UTF-8", "zh"), ("en_US", "en"), ("", "en")):
        monkeypatch.setenv("LABKIT_LANG", value)
        assert L.lang() == want, value
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("LABKIT_LANG", "zh_TW")
    assert L.chain("zh_TW") == ["zh_TW", "en"] and L.lang() == "en" and L.lang() == "en"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Traditional Chinese (zh_TW) translation" in err and "pybabel init" in err
    with pytest.raises(ValueError, match="no Traditional Chinese"):
        L.set_lang("zh_Hant")


def test_the_old_store_imports_without_losing_po_edits():
    from labkit.i18n.convert import Importer
    imp = Importer.__new__(Importer)
    imp.base, imp.lines = {}, []
    imp.report = collections.defaultdict(int)
    w = "x.po"
    assert imp.take(w, "k", None, ("a", "甲"))                          # new: added
    assert not imp.take(w, "k", ("a", "甲"), ("a", "甲"))               # again: nothing
    assert imp.take(w, "k", ("a", "甲"), ("a", "甲2"))                  # old store changed, .po not: taken
    assert not imp.take(w, "k", ("a", "乙"), ("a", "甲2"))              # .po edited, old store not: kept
    assert not imp.take(w, "k", ("a", "乙"), ("a", "甲3"))              # both changed: .po kept, said
    assert imp.report["conflicts"] == 1 and "the .po is kept" in imp.lines[0]


# -- the format and the checks themselves, on small made-up notebooks ----------------------
def _nb(*cells_):
    nb = nbformat.v4.new_notebook()
    for i, (kind, src) in enumerate(cells_):
        c = nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
        c["id"] = f"c{i}"
        nb.cells.append(c)
    return nb


MD, CODE = "# Title\n\nSome *text*.", "%%ranks\nx = f(1, 'a #b')   # make x\n# done\nx"


def _file(md=None, code=None, md_en=MD, code_en=CODE):
    entries = [("c0", md_en, md if md is not None else "# 标题\n\n一些*文字*。")]
    if code is not False:
        entries.append(("c1", code_en, code if code is not None else
                        "%%ranks\nx = f(1, 'a #b')   # 得到 x\n# 完成\n# 多一行注释\n\nx"))
    return render(entries, "zh")


def test_a_sound_translation_applies():
    nb = _nb(("md", MD), ("code", CODE))
    out, found = cells.translate(nb, parse(_file(), "zh"))
    assert found == []
    assert out.cells[0].source == "# 标题\n\n一些*文字*。"
    assert "# 得到 x" in out.cells[1].source and nb.cells[1].source == CODE


def test_stale_entry_names_cell_and_english_first_line():
    nb = _nb(("md", "# New title\n\nChanged."), ("code", CODE))
    found = problems(nb, parse(_file(), "zh"))
    assert [(p.cell, p.kind) for p in found] == [("c0", "stale")]
    assert "translation is stale (its msgid is not the English cell): update it" in found[0].text
    assert "# New title" in found[0].text


@pytest.mark.parametrize("code", [
    "%%ranks\nx = f(1, 'a #c')   # 得到 x\nx",          # a string changed
    "%%ranks\nx = f(2, 'a #b')\nx",                    # a number changed
    "%%ranks -n 2\nx = f(1, 'a #b')\nx",               # the magic line changed
    "%%ranks\nx = f(1, 'a #b')\nx\ny",                 # a line added
])
def test_code_entries_may_change_only_comments(code):
    assert code_difference(CODE, code)
    found = problems(_nb(("md", MD), ("code", CODE)), parse(_file(code=code), "zh"))
    assert [(p.cell, p.kind) for p in found] == [("c1", "code differs")]


def test_missing_markdown_and_unknown_cells_are_named():
    nb = _nb(("md", MD), ("code", CODE), ("md", "## Second\n"))
    text = render([("c0", MD, "# 标题"), ("c1", CODE, CODE), ("zz", "gone", "没有")], "zh")
    kinds = sorted((p.cell, p.kind) for p in problems(nb, parse(text, "zh")))
    assert kinds == [("c2", "missing"), ("zz", "unknown cell")]


@pytest.mark.parametrize("entries,why", [
    ([(None, "x", "y")], "without msgctxt"),
    ([("a", "x", "y"), ("a", "x", "z")], "translated twice"),
])
def test_malformed_files_are_refused(entries, why):
    po = P.new_po("zh", "t")
    for ctx, en, text in entries:
        po.append(polib.POEntry(msgctxt=ctx, msgid=en, msgstr=text))
    with pytest.raises(TranslationError, match=why):
        parse(str(po), "zh")


def test_a_file_of_another_language_is_refused():
    with pytest.raises(TranslationError, match="Language: fr"):
        parse(str(P.new_po("fr", "t")) + "\n", "zh")


def test_build_in_chinese_keeps_stripping_and_falls_back_to_english(tmp_path, capsys):
    from labkit.course.exercises import build
    src = tmp_path / "notebooks"
    src.mkdir()
    code = "def f(t):\n    # the answer\n    ### BEGIN SOLUTION\n    return t\n    ### END SOLUTION\n"
    nbformat.write(_nb(("md", MD), ("code", code)), src / "01_a.ipynb")
    nbformat.write(_nb(("md", "# B\n")), src / "02_b.ipynb")
    (tmp_path / "i18n" / "zh" / "notebooks").mkdir(parents=True)
    (tmp_path / "i18n" / "zh" / "notebooks" / "01_a.po").write_text(render(
        [("c0", MD, "# 标题"), ("c1", code, code.replace("the answer", "答案"))], "zh"), encoding="utf-8")
    notes = []
    build(src, tmp_path / "learner-zh", lang="zh", notes=notes)
    a = nbformat.read(tmp_path / "learner-zh" / "01_a.ipynb", as_version=4)
    assert a.cells[0].id == "labkit-lang" and 'set_lang("zh")' in a.cells[0].source
    assert a.cells[1].source == "# 标题" and "# 答案" in a.cells[2].source
    assert "NotImplementedError" in a.cells[2].source and "return t" not in a.cells[2].source
    assert notes == ["notebooks/02_b.ipynb: no Chinese translation yet; copied in English"]
    assert nbformat.read(tmp_path / "learner-zh" / "02_b.ipynb", as_version=4).cells[1].source == "# B\n"
    build(src, tmp_path / "solutions-zh", lang="zh", solutions=True, notes=[])
    s = nbformat.read(tmp_path / "solutions-zh" / "01_a.ipynb", as_version=4)
    assert "return t" in s.cells[2].source and "# 答案" in s.cells[2].source


@pytest.mark.parametrize("lang,want", [
    ("en", "hung: rank 1 stuck in recv() at Cell In[5], line 7, in ring (a send without a recv, or a "
           "collective not every rank called?)"),
    ("zh", "卡住了：rank 1 停在 in recv()，位置 Cell In[5], line 7, in ring（是不是有 send 没有对应的 recv，"
           "或者某个集合通信不是每个 rank 都调用了？）"),
])
def test_a_rejoined_fragment_prints_what_the_two_pieces_printed(monkeypatch, lang, want):
    # " at {at}" was a fragment added to four messages; each is one whole message now, and the
    # text is the old store's, piece for piece (scripts/i18n-compare 416c0d4: the same)
    from labkit.check.core import describe_hang
    monkeypatch.setenv("LABKIT_LANG", lang)
    where = ("in recv() (most recent call last):\n  Cell In[5], line 7, in ring\n    dist.recv(t, src)\n"
             "  torch/distributed/c10d.py, line 9, in recv\n")
    assert describe_hang({1: where}) == want


def test_the_catalogs_plural_entry(monkeypatch):
    from labkit.i18n.messages import trn
    one, many = "deadlock: {n} stage can never move: {waits}", "deadlock: {n} stages can never move: {waits}"
    monkeypatch.setenv("LABKIT_LANG", "zh")
    assert trn(one, many, 1, waits="w") == "死锁：1 个 stage 永远无法推进：w"
    assert trn(one, many, 3, waits="w") == "死锁：3 个 stage 永远无法推进：w"
    monkeypatch.setenv("LABKIT_LANG", "en")
    assert trn(one, many, 1, waits="w") == "deadlock: 1 stage can never move: w"
    assert trn(one, many, 3, waits="w") == "deadlock: 3 stages can never move: w"


def test_marked_lines_may_translate_their_string_literals_only():
    en = "%%ranks\nprint(f'rank {r}: {n:,} B')\nverdict(ok, 'held')"
    assert code_difference(en, "%%ranks\nprint(f'rank {r}：{n:,} 字节')  # 译文\nverdict(ok, 'held')") is None
    assert code_difference(en, "%%ranks\nprint(f'{n:,} 字节，rank {r}')  # 译文\nverdict(ok, '守住')  # 译文") is None
    for zh in ["%%ranks\nprint(f'rank {r}：{n:,} 字节')\nverdict(ok, 'held')",       # not marked
               "%%ranks\nprint(f'rank {r}：字节')  # 译文\nverdict(ok, 'held')",       # a field lost
               "%%ranks\nprint(f'rank {r}：{n} 字节')  # 译文\nverdict(ok, 'held')",   # a field changed
               "%%ranks\nprint('rank {r}：{n:,} 字节')  # 译文\nverdict(ok, 'held')",  # no longer an f-string
               "%%ranks\nprint(f'rank {r}：{n:,} 字节')  # 译文\nverdict(ok, 'held')\nx",  # code added
               "%%ranks\nprint(f'rank {r}：{n:,} 字节')\nverdict(ok, '守住')  # 译文x"]:  # another comment
        assert code_difference(en, zh), zh


def test_verdict_text_goes_through_the_catalog_but_its_program_word_does_not(capsys, monkeypatch):
    from labkit.verdict import verdict
    monkeypatch.setenv("LABKIT_LANG", "en")
    verdict(True, "all_reduce (sum)")
    verdict(False, "rank {r} of {n}")                   # braces of an unformatted text stay
    assert capsys.readouterr().out == "ok: all_reduce (sum)\nMISS: rank {r} of {n}\n"
    monkeypatch.setenv("LABKIT_LANG", "zh")
    verdict(False, "all_reduce (sum)")
    assert capsys.readouterr().out == f"MISS: {MESSAGES['all_reduce (sum)']}\n"


def _literals() -> set:
    import ast
    out = set()
    for path in (ROOT / "labkit").rglob("*.py"):
        if "/i18n/" not in str(path):
            out |= {n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    for _, code in E.notebook_sources(ROOT):
        try:
            out |= {n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        except SyntaxError:
            pass
    return out


def test_no_obsolete_message_is_still_written_in_the_code():
    # a key update marked obsolete (#~) because extraction missed it, though the code still
    # passes it to tr() through a variable, would print English: mark it N_() where it is written
    gone = {e.msgid for e in polib.pofile(str(MESSAGES_PO)) if e.obsolete}
    bad = sorted(gone & _literals())
    assert not bad, ("obsolete in labkit.po, but still in the code (mark them N_() and revive them):\n"
                     + "\n".join(map(repr, bad)))
