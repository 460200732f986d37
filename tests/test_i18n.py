"""The Chinese edition kept in step with the English (pure: reads files, starts no process).

For every translation file in i18n/zh/: each entry names a cell that exists and translates its
current English text (else "translation is stale: update it"), every markdown cell has an entry,
and code entries differ from the English only in comments. i18n/zh/untranslated.txt lists the
notebooks and decks without a file yet, and must shrink as files land. Every catalog message
keeps the format fields of its English key.
"""
import collections
import pathlib

import nbformat
import pytest

from labkit.i18n import cells, messages, zh
from labkit.i18n.cells import TranslationError, code_difference, en_hash, parse, problems, render

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("notebooks", "slides")
SOURCES = {f"{d}/{p.stem}": p for d in FOLDERS for p in sorted((ROOT / d).glob("*.ipynb"))}
FILES = {f"{d}/{p.stem}": p for d in FOLDERS for p in sorted((ROOT / "i18n" / "zh" / d).glob("*.md"))}
UNTRANSLATED = ROOT / "i18n" / "zh" / "untranslated.txt"


def untranslated() -> list:
    lines = UNTRANSLATED.read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _problems(name: str, kinds) -> list:
    nb = nbformat.read(SOURCES[name], as_version=4)
    entries = parse(FILES[name].read_text(encoding="utf-8"), "zh", where=str(FILES[name]))
    return [f"{name}.ipynb {p}" for p in problems(nb, entries) if p.kind in kinds]


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_entry_translates_the_current_english(name):
    assert name in SOURCES, f"i18n/zh/{name}.md translates {name}.ipynb, which does not exist"
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
    bad = [(en, sorted(messages.fields_of(en)), sorted(messages.fields_of(t)))
           for en, t in zh.MESSAGES.items()
           if sorted(messages.fields_of(en)) != sorted(messages.fields_of(t))]
    assert not bad, "\n".join(f"{en!r}: fields {a} in English, {b} in Chinese" for en, a, b in bad)


def test_catalog_keeps_the_words_programs_read():
    for en, text in zh.MESSAGES.items():
        for word in ("FAIL", "MISS:", "ok:"):
            assert (word in en) == (word in text), f"{en!r}: '{word}' must stay as it is"


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
    entries = [("c0", en_hash(md_en), md if md is not None else "# 标题\n\n一些*文字*。")]
    if code is not False:
        entries.append(("c1", en_hash(code_en), code if code is not None else
                        "%%ranks\nx = f(1, 'a #b')   # 得到 x\n# 完成\n# 多一行注释\n\nx"))
    return render(entries, "zh")


def test_a_sound_translation_applies():
    nb = _nb(("md", MD), ("code", CODE))
    out, found = cells.translate(nb, parse(_file() + "\n\n\n", "zh"))
    assert found == []
    assert out.cells[0].source == "# 标题\n\n一些*文字*。"
    assert "# 得到 x" in out.cells[1].source and nb.cells[1].source == CODE


def test_stale_entry_names_cell_and_english_first_line():
    nb = _nb(("md", "# New title\n\nChanged."), ("code", CODE))
    found = problems(nb, parse(_file(), "zh"))
    assert [(p.cell, p.kind) for p in found] == [("c0", "stale")]
    assert "translation is stale: update it" in found[0].text and "# New title" in found[0].text


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


def test_missing_markdown_and_unknown_cells_are_named():
    nb = _nb(("md", MD), ("code", CODE), ("md", "## Second\n"))
    text = _file() + "\n" + render([("zz", "0" * 12, "没有")], "zh")
    kinds = sorted((p.cell, p.kind) for p in problems(nb, parse(text, "zh")))
    assert kinds == [("c2", "missing"), ("zz", "unknown cell")]


@pytest.mark.parametrize("text,why", [
    ("preface\n<!-- labkit-zh cell=a en=000000000000 -->\nx", "before the first"),
    ("<!-- labkit-zh cell=a en=000000000000 -->\nx\n<!-- labkit-zh cell=a en=000000000000 -->\ny",
     "translated twice"),
    ("<!-- labkit-fr cell=a en=000000000000 -->\nx", "labkit-fr marker"),
])
def test_malformed_files_are_refused(text, why):
    with pytest.raises(TranslationError, match=why):
        parse(text, "zh")


def test_build_in_chinese_keeps_stripping_and_falls_back_to_english(tmp_path, capsys):
    from labkit.exercises import build
    src = tmp_path / "notebooks"
    src.mkdir()
    code = "def f(t):\n    # the answer\n    ### BEGIN SOLUTION\n    return t\n    ### END SOLUTION\n"
    nbformat.write(_nb(("md", MD), ("code", code)), src / "01_a.ipynb")
    nbformat.write(_nb(("md", "# B\n")), src / "02_b.ipynb")
    (tmp_path / "i18n" / "zh" / "notebooks").mkdir(parents=True)
    (tmp_path / "i18n" / "zh" / "notebooks" / "01_a.md").write_text(render(
        [("c0", en_hash(MD), "# 标题"), ("c1", en_hash(code), code.replace("the answer", "答案"))], "zh"))
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


# every module of the package: a message passed to tr() or tr_fig() as a literal has its Chinese
TRANSLATED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "labkit").rglob("*.py")
                    if "/i18n/" not in str(p))


def _literal_keys(path):
    import ast
    for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("tr", "tr_fig") \
                and node.args and isinstance(node.args[0], ast.Constant):
            yield node.args[0].value


@pytest.mark.parametrize("path", TRANSLATED)
def test_every_message_of_a_translated_module_has_its_chinese(path):
    missing = [k for k in _literal_keys(path) if k not in zh.MESSAGES]
    assert not missing, f"{path}: tr() messages without a Chinese entry in labkit/i18n/zh*.py:\n" + \
        "\n".join(map(repr, missing))


def test_a_message_in_two_parts_of_the_catalog_says_the_same_thing():
    # labkit.i18n.zh merges its PARTS in order: a key in two of them would silently take the
    # last one's Chinese (it happened with ", " and "knob" when three engineers' parts met)
    import ast
    import importlib
    base = [n for n in ast.parse((ROOT / "labkit/i18n/zh.py").read_text(encoding="utf-8")).body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "MESSAGES"][0]
    seen = {k: ("zh", v) for k, v in ast.literal_eval(base.value).items()}
    clash = []
    for part in zh.PARTS:
        for k, v in importlib.import_module(f"labkit.i18n.{part}").MESSAGES.items():
            if k in seen and seen[k][1] != v:
                clash.append(f"{k!r}: {seen[k][0]} says {seen[k][1]!r}, {part} says {v!r}")
            seen.setdefault(k, (part, v))
    assert not clash, "one English message, two Chinese texts:\n" + "\n".join(clash)


def test_verdict_text_goes_through_the_catalog_but_its_program_word_does_not(capsys, monkeypatch):
    from labkit.verdict import verdict
    monkeypatch.setenv("LABKIT_LANG", "en")
    verdict(True, "all_reduce (sum)")
    verdict(False, "rank {r} of {n}")                   # braces of an unformatted text stay
    assert capsys.readouterr().out == "ok: all_reduce (sum)\nMISS: rank {r} of {n}\n"
    monkeypatch.setenv("LABKIT_LANG", "zh")
    verdict(False, "all_reduce (sum)")
    assert capsys.readouterr().out == f"MISS: {zh.MESSAGES['all_reduce (sum)']}\n"
