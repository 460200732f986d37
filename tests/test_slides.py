"""The instructor decks build into reveal.js HTML that loads nothing from the network."""
import pathlib
import re
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("npm") is None, reason="fetching reveal.js needs npm")
def test_decks_build_and_reference_only_local_files(tmp_path):
    from labkit.slides import build
    written = build(ROOT / "slides", tmp_path)
    assert {p.name for p in written} == {p.stem + ".slides.html" for p in (ROOT / "slides").glob("*.ipynb")}
    for page in written:
        html = page.read_text()
        links = re.findall(r'(?:src|href)="([^"#][^"]*)"', html)
        remote = [u for u in links if re.match(r"(https?:)?//", u)]
        assert not remote, f"{page.name} loads {remote} from the network"
        for url in links:
            if not url.startswith("data:"):
                assert (tmp_path / url.split("?")[0]).exists(), f"{page.name}: {url} is missing"
        assert "Reveal.initialize" in html or "Reveal" in html
