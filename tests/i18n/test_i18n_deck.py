"""Every Chinese deck builds (not executed: the English decks' run is tested by test_slides.py).

Each deck of slides/ is built with lang="zh" and its HTML read back cell by cell (nbconvert
marks each cell `id="cell-id=<id>"`), against the English deck:
- every markdown cell (slides and speaker notes) is there, in Chinese: the Chinese runs of its
  translation entry are in the rendered text, and no English phrase of four words or more of
  the English cell is left (a cell the translation missed shows its English);
- every code cell is there with the English deck's code (comments may be translated:
  `labkit.i18n.cells.same_code`: the shown code is the English cell's);
- the page is marked `<html lang="zh-Hans">`, so a browser picks a Simplified Chinese font.
The decks are built into build/slides-zh (tests/support/deck_build.chinese; a deck unchanged since
its last build is reused, and the browser test opens deck 00 from there). The English deck 00
is built first through tests/support/deck_build (once per CI run, shared with test_slides.py), so
reveal.js is fetched under its lock and never twice at once.
"""
import html.parser
import pathlib
import re

import nbformat
import pytest

from labkit.i18n.cells import first_line, same_code
from labkit.course.translate import read_entries
from labkit.course.decks import slide_type

pytestmark = pytest.mark.cluster          # the English deck it waits for runs ranks

ROOT = pathlib.Path(__file__).resolve().parents[2]
DECKS = sorted((ROOT / "slides").glob("*.ipynb"))
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
# four or more English words in a row (code spans, math, links, tags and quoted messages, which a
# translation keeps as the program prints them, taken out first)
PHRASE = re.compile(r"[A-Za-z][A-Za-z']+(?:[ ,;:-]+[A-Za-z][A-Za-z']*){3,}")
_NOT_PROSE = re.compile(r'`[^`]*`|"[^"\n]*"|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|<[^>]+>|https?://\S+', re.S)


class _Cells(html.parser.HTMLParser):
    """cell id -> the text a reader sees of that cell: a markdown cell's rendered text, a code
    cell's source (the <pre> of its input); prompts and heading anchors left out."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells, self.cell, self.skip, self.in_pre = {}, None, 0, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if (a.get("id") or "").startswith("cell-id="):
            self.cell = a["id"][len("cell-id="):]
            self.cells[self.cell] = {"code": "jp-CodeCell" in (a.get("class") or ""), "text": ""}
        elif tag in ("script", "style") or (tag == "a" and "anchor-link" in (a.get("class") or "")):
            self.skip += 1
        if tag == "pre":
            self.in_pre = True

    def handle_endtag(self, tag):
        if tag in ("script", "style", "a") and self.skip:     # no <a> inside an anchor link
            self.skip -= 1
        if tag == "pre":
            self.in_pre = False

    def handle_data(self, data):
        if self.cell is None or self.skip or data.strip() in ("In\xa0[\xa0]:", "In [ ]:", "¶"):
            return
        c = self.cells[self.cell]
        if not c["code"] or self.in_pre:
            c["text"] += data


def shown_cells(page: str) -> dict:
    parser = _Cells()
    parser.feed(page[page.find("<body"):])
    return parser.cells


def english_left(en: str, shown: str) -> list:
    """The English phrases (four words or more) of the English cell still in the shown text."""
    flat = " ".join(shown.split())
    return [p for p in PHRASE.findall(_NOT_PROSE.sub(" ", en)) if " ".join(p.split()) in flat]


def deck_problems(deck: pathlib.Path, page: str) -> list:
    """What in the built Chinese page of `deck` is not the Chinese of the English deck."""
    en, entries = nbformat.read(deck, as_version=4), read_entries(deck, "zh") or {}
    cells, out = shown_cells(page), []
    if '<html lang="zh-Hans">' not in page:
        out.append('the page is not marked <html lang="zh-Hans">')
    for i, cell in enumerate(en.cells):
        kind = slide_type(cell)
        where = f"cell {i} (id {cell.id}, {'speaker note' if kind == 'notes' else cell.cell_type})"
        if kind == "skip":
            continue
        shown = cells.get(cell.id)
        if shown is None:
            out.append(f"{where}: not in the page")
        elif cell.cell_type == "code":
            if not same_code(cell.source, shown["text"]):
                out.append(f"{where}: its code differs from the English deck's ('{first_line(shown['text'])}')")
        else:
            entry, text = entries.get(cell.id), " ".join(shown["text"].split())
            lost = [r for r in CJK.findall(entry.text) if r not in text] if entry else []
            left = english_left(cell.source, shown["text"])
            if entry is None or lost or left or (CJK.search(entry.text) and not CJK.search(text)):
                why = ("it has no translation" if entry is None else
                       f"English left: {left[0]!r}" if left else f"the translation's {lost[0]!r} is missing")
                out.append(f"{where} is not in Chinese ({why}); the English begins '{first_line(cell.source)}'")
    return out


_pages = {}


def built_page(deck: pathlib.Path) -> str:
    """The Chinese deck's HTML, built into build/slides-zh (reused by the browser test)."""
    if deck.name not in _pages:
        from support.deck_build import DECKS as ENGLISH, chinese, executed
        executed(next(d for d in ENGLISH if d.name == "00_cluster.ipynb"))   # reveal.js is in build/vendor
        _pages[deck.name] = chinese(deck).html.read_text(encoding="utf-8")
    return _pages[deck.name]


@pytest.mark.parametrize("deck", DECKS, ids=[d.stem for d in DECKS])
def test_every_deck_builds_in_chinese(deck):
    page = built_page(deck)
    bad = deck_problems(deck, page)
    assert not bad, f"slides/{deck.name} in Chinese:\n" + "\n".join(bad[:10])


def test_deck_00_reads_in_chinese():
    """Spot checks of one deck against the words a reader sees (the test above is generic)."""
    html = built_page(DECKS[0])
    assert "00 · 你的集群" in html and "集群只启动一次" in html          # slides
    assert "问大家" in html                                             # speaker notes
    assert "Start the cluster once" not in html and "Ask the room" not in html
    assert "原地操作" in html                                            # a translated comment
    assert "demo_all_reduce" in html and "forgot_to_send" in html       # the code itself
