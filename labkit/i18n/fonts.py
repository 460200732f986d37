"""A font with Chinese characters for matplotlib's figures.

`use_cjk()` finds one (Debian's fonts-noto-cjk, WenQuanYi, Source Han, or the file named by
``LABKIT_CJK_FONT``), adds it to matplotlib as the fallback after its default font family (Latin
letters and digits keep matplotlib's look; Chinese characters come from the CJK font), and
raises `MissingFont`, naming what to install, when there is none: a figure with empty boxes
instead of characters is never drawn.
"""
import glob
import os

FAMILIES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
            "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Droid Sans Fallback",
            "Microsoft YaHei", "SimHei", "PingFang SC", "Heiti SC")
_GLOBS = ("/usr/share/fonts/**/NotoSansCJK*", "/usr/share/fonts/**/*wqy*", "/usr/share/fonts/**/*SourceHanSans*",
          "/usr/share/fonts/**/DroidSansFallback*", "~/.local/share/fonts/**/*", "~/.fonts/**/*",
          "/Library/Fonts/*", "/System/Library/Fonts/*", "C:/Windows/Fonts/msyh*", "C:/Windows/Fonts/simhei*")
PROBE = "显存"        # characters the font must have


class MissingFont(RuntimeError):
    """No font with Chinese characters for matplotlib."""


HOW_TO_INSTALL = (
    "no font with Chinese characters was found for matplotlib's figures, so they would show "
    "empty boxes. Install one and restart the kernel: on Debian or Ubuntu `sudo apt-get install "
    "fonts-noto-cjk` (scripts/setup does this when run as root); elsewhere any Noto Sans CJK SC "
    "or Source Han Sans SC font, or point LABKIT_CJK_FONT at a .ttf/.otf/.ttc file. Or keep "
    "English output: labkit.set_lang('en').")

_chosen = None


def has_glyphs(path: str, text: str = PROBE) -> bool:
    """Whether the font file has a glyph (not the missing-glyph box) for every character."""
    from matplotlib.ft2font import FT2Font
    try:
        font = FT2Font(path)
    except (OSError, RuntimeError, ValueError):
        return False
    return all(font.get_char_index(ord(ch)) != 0 for ch in text)


def find_cjk() -> tuple:
    """(family, file) of a font matplotlib can draw Chinese with; raises MissingFont."""
    from matplotlib import font_manager as fm
    own = os.environ.get("LABKIT_CJK_FONT")
    files = [own] if own else []
    for pattern in _GLOBS:
        files += glob.glob(os.path.expanduser(pattern), recursive=True)
    known = {f.fname for f in fm.fontManager.ttflist}
    for path in files:
        if path and os.path.isfile(path) and path not in known and path.lower().endswith((".ttf", ".otf", ".ttc")):
            try:
                fm.fontManager.addfont(path)
            except (OSError, RuntimeError, ValueError):
                pass
    order = {name: i for i, name in enumerate(FAMILIES)}
    ranked = sorted(fm.fontManager.ttflist,
                    key=lambda f: (not (own and f.fname == own), order.get(f.name, len(order))))
    for f in ranked:
        if (f.name in order or (own and f.fname == own)) and has_glyphs(f.fname):
            return f.name, f.fname
    raise MissingFont(HOW_TO_INSTALL)


def use_cjk() -> str:
    """Set matplotlib to draw Chinese (once per process); returns the CJK font's family."""
    global _chosen
    if _chosen:
        return _chosen
    import matplotlib
    family, _ = find_cjk()
    # per-glyph fallback runs over the families named in font.family (a generic name such as
    # "sans-serif" stands for one font): Latin from the usual font, Chinese from the CJK one
    families = [f for f in matplotlib.rcParams["font.family"] if f != family]
    matplotlib.rcParams["font.family"] = (families or ["sans-serif"]) + [family]
    _chosen = family
    return family
