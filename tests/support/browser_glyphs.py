"""Whether chromium drew Chinese text with real glyphs (not the missing-glyph box), two ways:

- the fonts: the DevTools protocol's CSS.getPlatformFontsForNode names the fonts that drew a
  node's text and how many glyphs each drew; a CJK font must have drawn the Chinese ones;
- the pixels: two different Chinese characters of that text and a code point no font has
  (U+3097, unassigned), each drawn alone at 64 px in the node's own font and language. Real
  glyphs differ from each other and from the missing-glyph box; boxes all look alike.
"""
import io
import re

CJK = re.compile(r"[\u3400-\u9fff]")
CJK_FONT = re.compile(r"CJK|Source Han|WenQuanYi|Droid Sans Fallback|AR PL|Noto Sans SC|Noto Serif SC", re.I)
# the Simplified Chinese ones: a Japanese, Korean or Traditional CJK font draws some shared
# characters in its own region's forms (真, the full-width colon in the middle of the line)
SC_FONT = re.compile(r"CJK SC|Sans SC|Serif SC|Han (Sans|Serif) (SC|CN)|WenQuanYi|AR PL|Droid Sans Fallback|"
                     r"YaHei|SimHei|SimSun|PingFang SC|Heiti SC", re.I)
UNASSIGNED = "\u3097"           # no character here in any Unicode version: every font lacks it
MIN_DIFFERENT = 0.02            # share of the cell's pixels that must differ between two glyphs


def platform_fonts(page, selector: str) -> list:
    """[{familyName, postScriptName, glyphCount, isCustomFont}] of the fonts that drew the text
    of the first element matching `selector` (its children's text included)."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        assert node, f"no element matches {selector!r}"
        return cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    finally:
        cdp.detach()


CELL = 80                       # px: each character is drawn alone in a CELL x CELL box


def glyph_pictures(page, selector: str, chars: str, shot=None) -> list:
    """Each of `chars` drawn alone (64 px, black on white) in the font and language of the
    element `selector`, in one screenshot (saved at `shot` when given) cut into one boolean ink
    mask per character."""
    import matplotlib.image
    page.evaluate("""([sel, chars, cell]) => {
        const el = document.querySelector(sel), css = getComputedStyle(el);
        const box = document.createElement('div');
        box.id = 'labkit-glyphs';
        box.lang = el.closest('[lang]')?.lang || '';
        box.style.cssText = 'position:fixed;left:0;top:0;z-index:2147483647;display:flex;background:#fff';
        for (const ch of chars) {
            const s = document.createElement('span');
            s.textContent = ch;
            s.style.cssText = `flex:none;width:${cell}px;height:${cell}px;line-height:${cell}px;` +
                `text-align:center;overflow:hidden;font-size:64px;color:#000;background:#fff;` +
                `font-family:${css.fontFamily};font-weight:${css.fontWeight};font-style:normal`;
            box.appendChild(s);
        }
        document.body.appendChild(box);
    }""", [selector, chars, CELL])
    try:
        png = page.locator("#labkit-glyphs").screenshot(**({"path": str(shot)} if shot else {}))
    finally:
        page.evaluate("() => document.getElementById('labkit-glyphs').remove()")
    ink = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3].mean(axis=-1) < 0.5
    assert ink.shape[1] >= CELL * len(chars), f"the glyph row is {ink.shape[1]} px wide"
    return [ink[:, i * CELL:(i + 1) * CELL] for i in range(len(chars))]


def problems(page, selector: str, where: str, shot=None) -> tuple:
    """(what is wrong with the Chinese of `selector`, a line saying what was found). `shot`: a
    path for a screenshot of the three glyphs (the test's artefact)."""
    text = page.locator(selector).first.text_content()
    han = list(dict.fromkeys(CJK.findall(text)))
    if len(han) < 2:
        return [f"{where}: {selector!r} has fewer than two different Chinese characters: {text!r}"], ""
    fonts = platform_fonts(page, selector)
    said = ", ".join(f"{f['familyName']} ({f['glyphCount']} glyphs)" for f in fonts)
    found = []
    cjk = sum(f["glyphCount"] for f in fonts if CJK_FONT.search(f["familyName"]))
    if cjk < len(CJK.findall(text)):
        found.append(f"{where}: {len(CJK.findall(text))} Chinese characters, but the fonts that drew "
                     f"{selector!r} are {said}: no CJK font drew them (install fonts-noto-cjk)")
    elif sum(f["glyphCount"] for f in fonts if SC_FONT.search(f["familyName"])) < len(CJK.findall(text)):
        found.append(f"{where}: the Chinese characters of {selector!r} were drawn by {said}: not a "
                     "Simplified Chinese font, so some show their Japanese/Korean/Traditional forms "
                     "(labkit/i18n/lab_fonts.py names Noto Sans CJK SC for JupyterLab)")
    a, b, none = glyph_pictures(page, selector, han[0] + han[1] + UNASSIGNED, shot)
    for ch, m in ((han[0], a), (han[1], b)):
        if not m.any():
            found.append(f"{where}: {ch!r} drew nothing (no ink)")
        elif (m != none).mean() < MIN_DIFFERENT:
            found.append(f"{where}: {ch!r} looks like the missing-glyph box of U+3097 "
                         f"({(m != none).mean():.1%} of pixels differ): no font has it")
    if (a != b).mean() < MIN_DIFFERENT:
        found.append(f"{where}: {han[0]!r} and {han[1]!r} look alike ({(a != b).mean():.1%} of pixels "
                     "differ): both are missing-glyph boxes")
    return found, f"{where}: {''.join(han[:2])} drawn by {said}"
