"""The Chinese learner copies run the English copies' code: CI runs each learner copy with an
exercise once, in Chinese (scripts/test), and this is what makes that run stand for both. Pure:
both copies are built here (seconds), nothing is executed."""
import pathlib

import nbformat
import pytest

from labkit.course.exercises import BEGIN, build
from labkit.i18n.cells import same_code      # tokens without comments (translated text on marked lines)

ROOT = pathlib.Path(__file__).resolve().parents[2]
WITH_EXERCISE = [p.stem[:3].rstrip("_") for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                 if BEGIN in p.read_text(encoding="utf-8")]


@pytest.fixture(scope="module")
def copies(tmp_path_factory):
    out = tmp_path_factory.mktemp("copies")
    build(ROOT / "notebooks", out / "en", only=WITH_EXERCISE, notes=[])
    build(ROOT / "notebooks", out / "zh", lang="zh", only=WITH_EXERCISE, notes=[])
    return out


def test_every_notebook_with_an_exercise_is_checked():
    assert len(WITH_EXERCISE) >= 10, WITH_EXERCISE


@pytest.mark.parametrize("stem", WITH_EXERCISE)
def test_the_chinese_learner_copy_runs_the_english_copys_code(copies, stem):
    (en_path,) = (copies / "en").glob(f"{stem}*.ipynb")
    en = nbformat.read(en_path, as_version=4)
    zh = nbformat.read(copies / "zh" / en_path.name, as_version=4)
    en_code = [c for c in en.cells if c.cell_type == "code"]
    zh_code = [c for c in zh.cells if c.cell_type == "code" and c.get("id") != "labkit-lang"]
    assert [c.get("id") for c in zh_code] == [c.get("id") for c in en_code], \
        f"{en_path.name}: the Chinese copy's code cells are not the English copy's"
    for a, b in zip(en_code, zh_code):
        assert same_code(a.source, b.source), \
            f"{en_path.name} cell {a.get('id')}: the Chinese copy runs other code than the English"
        assert a.metadata.get("tags") == b.metadata.get("tags"), f"{en_path.name} cell {a.get('id')}: tags differ"
    lang = [c for c in zh.cells if c.get("id") == "labkit-lang"]
    assert len(lang) == 1 and 'labkit.set_lang("zh")' in lang[0].source
