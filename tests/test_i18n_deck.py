"""The Chinese deck 00 builds (not executed: the English deck's run is tested by test_slides.py):
every slide and speaker note in Chinese, the page marked zh-Hans for the browser's CJK font.
The English deck 00 is built first through tests/deck_build (once per CI run, shared with
test_slides.py), so reveal.js is fetched under its lock and never twice at once."""
import pathlib

import pytest

from labkit.slides.build import build_deck

pytestmark = pytest.mark.cluster          # the English deck it waits for runs ranks

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_deck_00_builds_in_chinese(tmp_path):
    from deck_build import DECKS, executed
    executed(next(d for d in DECKS if d.name == "00_cluster.ipynb"))      # reveal.js is in build/vendor
    built = build_deck(ROOT / "slides" / "00_cluster.ipynb", tmp_path, execute=False,
                       cache=ROOT / "build" / "vendor", lang="zh")
    html = built.html.read_text(encoding="utf-8")
    assert '<html lang="zh-Hans">' in html
    assert "00 · 你的集群" in html and "集群只启动一次" in html          # slides
    assert "问大家" in html                                             # speaker notes
    assert "Start the cluster once" not in html and "Ask the room" not in html
    assert "原地操作" in html                                            # a translated comment
    assert "demo_all_reduce" in html and "forgot_to_send" in html       # the code itself
