"""The instructor decks: short, with speaker notes, run without unexpected errors, and build into
single-file reveal.js HTML that embeds its figures and loads nothing from the network.

Each deck is executed once per session (tests/support/deck_build.py); the browser tests reuse the HTML.
What a deck must satisfy (tell deck authors):
  - 10 to 20 slides (cells with slide_type slide or subslide), every one with speaker notes
    (a cell of slide_type notes before the next slide);
  - no error output except in cells tagged raises-exception, and each tagged cell does raise;
  - a deck that draws calls labkit.slides.style() before its first figure; figures are PNGs;
  - no network URL (src=, href=, url(...) to http(s):// or //).
"""
import base64
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys

import pytest

from support.deck_build import DECKS, ROOT, executed
from labkit.slides import DPI
from labkit.course.decks import outline

NETWORK = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']?|url\(\s*["']?|@import\s+["'])(?:https?:)?//""", re.I)
LOADS = re.compile(r"""(?:\bsrc\s*=\s*["']?|url\(\s*["']?|@import\s+["'])(?:https?:)?//""", re.I)


def remote(html: str) -> list:
    """Network URLs the page would load: src/href/url()/@import in the markup and styles, and
    src/url()/@import inside the inlined scripts (a hyperlink in a library's help text, such as
    MathJax's <a href="https://www.mathjax.org">, loads nothing and is not counted)."""
    scripts = re.findall(r"(?s)<script[^>]*>(.*?)</script>", html)
    markup = re.sub(r"(?s)<script[^>]*>.*?</script>", "", html)
    return sorted({m.group(0) for m in NETWORK.finditer(markup)} | {m.group(0) for s in scripts for m in LOADS.finditer(s)})
needs_npm = pytest.mark.skipif(shutil.which("npm") is None and not (ROOT / "build" / "vendor" / "reveal.js").exists(),
                               reason="building the decks fetches reveal.js once with npm (Node.js)")
ids = [p.name for p in DECKS]


def load(deck):
    return json.loads(deck.read_text())


@pytest.mark.parametrize("deck", DECKS, ids=ids)
def test_deck_is_short_with_notes_on_every_slide(deck):
    slides = outline(load(deck))
    assert 10 <= len(slides) <= 20, f"{deck.name}: {len(slides)} slides; a deck has 10 to 20"
    bare = [f"{i + 1} ({s['title'] or 'untitled'})" for i, s in enumerate(slides) if not s["notes"]]
    assert not bare, f"{deck.name}: slides without speaker notes: {', '.join(bare)}"


@pytest.mark.parametrize("deck", DECKS, ids=ids)
def test_a_deck_that_draws_uses_the_slide_style(deck):
    cells = ["".join(c["source"]) for c in load(deck)["cells"] if c["cell_type"] == "code"]
    first_style = next((i for i, s in enumerate(cells) if "style()" in s), None)
    draws = [i for i, s in enumerate(cells) if re.search(r"\bplt\.|labkit\.show\.|\.plot\(|_plot\(", s)]
    if draws:
        assert first_style is not None and first_style <= draws[0], \
            f"{deck.name}: call labkit.slides.style() before the first figure (code cell {draws[0]})"


def _pngs(html: str) -> list:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def _dpi(png: bytes):
    """The dots per inch in a PNG's pHYs chunk (None when it has none)."""
    at = png.find(b"pHYs")
    if at < 0:
        return None
    x, _, unit = struct.unpack(">IIB", png[at + 4:at + 13])
    return round(x * 0.0254) if unit == 1 else None


@needs_npm
@pytest.mark.cluster
@pytest.mark.parametrize("deck", DECKS, ids=ids)
def test_deck_runs_and_builds_self_contained(deck):
    built = executed(deck)
    assert not built.errors, "unexpected errors:\n" + "\n".join(built.errors)
    html = built.html.read_text()
    urls = remote(html)
    assert not urls, f"{built.html.name} refers to the network: {urls[:5]}"
    slides = outline(load(deck))
    sections = len(re.findall(r"<section\b", html)) - html.count('<section class="stack"')
    assert html.count('<aside class="notes">') >= len(slides), f"{built.html.name}: speaker notes missing"
    assert sections >= len(slides), f"{built.html.name}: {sections} sections for {len(slides)} slides"
    pngs = _pngs(html)
    if any(s["plots"] for s in slides):
        assert pngs, f"{built.html.name}: the deck draws but no figure is embedded (data:image/png)"
    wrong = [d for d in map(_dpi, pngs) if d not in (None, DPI)]
    assert not wrong, f"{built.html.name}: figures at {wrong} dpi; labkit.slides.style() draws at {DPI}"


@needs_npm
def test_build_command_writes_one_file_per_deck(tmp_path):
    """The documented command, as committed (no execution): one .slides.html per deck, each
    a single file (reveal.js inlined), nothing from the network."""
    env = dict(os.environ, LABKIT_VENDOR=str(ROOT / "build" / "vendor"))      # fetched once
    out = subprocess.run([sys.executable, "-m", "labkit.slides", "build", "--only", "00", str(ROOT / "slides"),
                          str(tmp_path / "slides")], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    html = (tmp_path / "slides" / "00_cluster.slides.html").read_text()
    assert "Reveal.initialize" in html and "width: 1280, height: 720" in html
    assert not remote(html)
    markup = re.sub(r"(?s)<script>.*?</script>", "", html)     # the page, not the inlined libraries
    local = re.findall(r'(?:src|href)="(?!data:|#)([^"]+)"', markup)
    assert not local, f"files next to the deck are needed: {local[:5]}"


@needs_npm
@pytest.mark.cluster
def test_build_names_the_deck_and_cell_of_an_unexpected_error(tmp_path):
    """An error in an untagged cell fails the build naming deck and cell; a tagged cell that
    does not raise is reported too; a tagged cell that raises is fine."""
    cells = [("print('fine')", []), ("1 / 0", []), ("raise ValueError('on purpose')", ["raises-exception"]),
             ("x = 1", ["raises-exception"])]
    nb = {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {"tags": t, "slideshow": {"slide_type": "slide"}},
                     "source": s, "outputs": [], "execution_count": None} for i, (s, t) in enumerate(cells)],
          "metadata": {"kernelspec": {"name": "labkit", "display_name": "labkit", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "decks").mkdir()
    (tmp_path / "decks" / "99_broken.ipynb").write_text(json.dumps(nb))
    env = dict(os.environ, LABKIT_VENDOR=str(ROOT / "build" / "vendor"))
    out = subprocess.run([sys.executable, "-m", "labkit.slides", "build", "--execute", str(tmp_path / "decks"),
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "99_broken.ipynb cell 1 (id c1): ZeroDivisionError" in out.stdout
    assert "99_broken.ipynb cell 3 (id c3): tagged raises-exception but ran without an error" in out.stdout
    assert "cell 2" not in out.stdout and "cell 0" not in out.stdout


def test_an_executed_build_is_rebuilt_when_the_library_changes(tmp_path, monkeypatch):
    """The build cache's key: a deck's figures come from labkit, so an executed build is stale
    once any labkit module changes; a build as committed depends only on the deck and the template."""
    from labkit.course import decks as B
    (tmp_path / "labkit" / "course").mkdir(parents=True)
    (tmp_path / "labkit" / "course" / "deck.css").write_text("a {}")
    (tmp_path / "labkit" / "plots.py").write_text("SIZE = 1\n")
    deck = tmp_path / "d.ipynb"
    deck.write_text("{}")
    monkeypatch.setattr(B, "HERE", tmp_path / "labkit" / "course")
    before = B.key(deck, True), B.key(deck, False)
    (tmp_path / "labkit" / "plots.py").write_text("SIZE = 2\n")
    after = B.key(deck, True), B.key(deck, False)
    assert after[0] != before[0] and after[1] == before[1]
    (tmp_path / "labkit" / "course" / "deck.css").write_text("a { color: red }")
    styled = B.key(deck, False)
    assert styled != after[1]
    (tmp_path / "labkit" / "course" / "exercises.py").write_text("STUB = 1\n")   # beside, not a deck's file
    assert B.key(deck, False) == styled
