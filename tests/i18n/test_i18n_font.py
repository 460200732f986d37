"""Figures in Chinese: a CJK font is found and matplotlib draws real glyphs, not empty boxes.

Each character is drawn alone to pixels: two different characters drawn with the font differ,
while without it both come out as the same missing-glyph box (checked too, so the test can fail).
"""
import os

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from labkit.i18n import fonts  # noqa: E402


def _pixels(ch: str, family: list = None) -> np.ndarray:
    """The character drawn alone (family None: as rcParams say now)."""
    import matplotlib.pyplot as plt
    with matplotlib.rc_context({"font.family": family} if family else {}):
        fig = plt.figure(figsize=(0.6, 0.6), dpi=50)
        fig.text(0.5, 0.5, ch, ha="center", va="center", fontsize=24)
        fig.canvas.draw()
        img = np.asarray(fig.canvas.buffer_rgba())[..., 0].copy()
        plt.close(fig)
    return img


def _cjk_or_skip():
    try:
        return fonts.find_cjk()
    except fonts.MissingFont:
        if os.environ.get("CI"):
            raise                         # CI installs fonts-noto-cjk (scripts/setup): must be there
        pytest.skip("no CJK font here (install fonts-noto-cjk); CI has one")


def test_chinese_glyphs_are_drawn_not_boxes(tmp_path):
    family, path = _cjk_or_skip()
    assert fonts.has_glyphs(path, "显存梯度累积流水线气泡")
    a, b = _pixels("显", ["DejaVu Sans", family]), _pixels("存", ["DejaVu Sans", family])
    assert a.min() < 128 and b.min() < 128, "nothing was drawn"
    assert (a != b).sum() > 20, "two different characters look the same: empty boxes"
    # the control: without the CJK font both are the same missing-glyph box
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # matplotlib warns "Glyph ... missing"
        assert (_pixels("显", ["DejaVu Sans"]) == _pixels("存", ["DejaVu Sans"])).all()


def test_set_lang_zh_draws_a_chinese_title(tmp_path, monkeypatch):
    _cjk_or_skip()
    import matplotlib.pyplot as plt
    import labkit
    monkeypatch.setenv("LABKIT_LANG", "en")
    with matplotlib.rc_context():
        labkit.set_lang("zh")
        fig, ax = plt.subplots(figsize=(4, 2))
        ax.set_title(labkit.i18n.tr_fig("all_reduce (sum)"))
        ax.plot([0, 1], [0, 1])
        fig.savefig(tmp_path / "zh_title.png")
        plt.close(fig)
        assert "all_reduce（求和）" == labkit.i18n.tr("all_reduce (sum)")
        assert matplotlib.rcParams["font.family"][-1] == fonts.use_cjk()
        assert (_pixels("显") != _pixels("存")).sum() > 20, "set_lang('zh') draws empty boxes"
    if os.environ.get("LABKIT_SAVE_PNG"):
        (tmp_path / "zh_title.png").replace(os.environ["LABKIT_SAVE_PNG"])


def test_without_a_cjk_font_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(fonts, "FAMILIES", ("No Such Font SC",))
    monkeypatch.setattr(fonts, "_GLOBS", ())
    monkeypatch.setattr(fonts, "_chosen", None)
    monkeypatch.delenv("LABKIT_CJK_FONT", raising=False)
    with pytest.raises(fonts.MissingFont, match="fonts-noto-cjk"):
        fonts.use_cjk()


def test_jupyterlab_gets_the_simplified_chinese_fonts_and_keeps_the_users(tmp_path):
    import json
    from labkit.i18n import lab_fonts
    f = tmp_path / lab_fonts.SETTINGS_FILE
    assert "JupyterLab draws Chinese" in lab_fonts.write_user_settings(tmp_path)      # no file yet
    stack = json.loads(f.read_text())["overrides"]["content-font-family"]
    assert stack.index("sans-serif") < stack.index('"Noto Sans CJK SC"') < stack.index("Emoji")
    # the user's own settings (JSON5: a comment, a trailing comma) and a font they chose are kept
    f.write_text('{\n  // mine\n  "theme": "JupyterLab Dark",\n  "overrides": {"ui-font-family": "Inter",},\n}\n')
    lab_fonts.write_user_settings(tmp_path)
    data = json.loads(f.read_text())
    assert data["theme"] == "JupyterLab Dark" and data["overrides"]["ui-font-family"] == "Inter"
    assert "Noto Sans CJK SC" in data["overrides"]["content-font-family"]
    assert "kept the fonts you chose" in lab_fonts.write_user_settings(tmp_path)
    f.write_text("{ not json")
    assert "left" in lab_fonts.write_user_settings(tmp_path) and f.read_text() == "{ not json"
