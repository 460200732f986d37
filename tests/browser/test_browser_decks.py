"""Every built deck opened in chromium at 1280 x 720, slide by slide (all fragments shown):

- every visible text of a slide is at least 24 px on screen (computed font size x reveal's scale);
- every figure's text is at least 16 px: figures are PNGs drawn under labkit.slides.style(),
  whose smallest text is MIN_FONT_PT at DPI, so on screen it is
  displayed width / natural width x MIN_FONT_PT x DPI / 72 px. This TRUSTS style(): a plot that
  sets a smaller fontsize itself is not seen here (the deck authors keep library plots >= 14 pt);
- a slide with a figure, screenshotted, is not blank (pixel variance of the figure);
- every slide fits the 1280 x 720 slide: no visible text (of a paragraph, table, code, output)
  and no picture reaches below the slide's bottom or past its right edge (a section scrolls
  rather than showing what overflows, so without this check the bottom of a table or figure is
  silently cut off). A failure names the deck, the slide and what is cut (tag, text or image);
- no Chinese on a slide (the notes keep the course's Chinese): a projector's browser may have no
  CJK font (this chromium has none) and would show boxes.
The screenshot of each slide that shows a problem is kept under build/browser/decks/<deck>/
(test artefacts); LABKIT_DECK_SHOTS=1 keeps every slide's (a PNG per slide costs CPU in CI).
"""
import os

import pytest

from support.browser_helpers import chromium, shot_path, variance
from support.deck_build import DECKS, executed
from labkit.slides import DPI, MIN_FONT_PT

pytestmark = [pytest.mark.browser, pytest.mark.cluster]
BODY_PX, FIGURE_PX = 24, 16

MEASURE = """() => {
  const scale = Reveal.getScale(), slide = Reveal.getCurrentSlide();
  const texts = [], imgs = [];
  const walk = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const node = walk.currentNode, el = node.parentElement, text = node.textContent.trim();
    if (!text || el.closest('aside.notes, mjx-container, script, style')) continue;
    const css = getComputedStyle(el);
    if (css.display === 'none' || css.visibility === 'hidden' || el.getClientRects().length === 0) continue;
    texts.push({px: parseFloat(css.fontSize) * scale, text: text.slice(0, 50), tag: el.tagName,
                cjk: (text.match(/[\u3000-\u9fff\uff00-\uffef]+/) || [''])[0]});
  }
  for (const img of slide.querySelectorAll('img')) {
    imgs.push({shown: img.offsetWidth * scale, natural: img.naturalWidth, ok: img.complete && img.naturalWidth > 0});
  }
  const h = slide.querySelector('h1, h2, h3');
  return {scale, texts, imgs, title: h ? h.textContent.replace('\u00b6', '').trim() : ''};
}"""

# What a viewer would miss on the current slide (all fragments shown): each visible text (its
# rendered box, not its element's padding) and each picture (img, svg, canvas) that reaches past
# the slide's bottom or right edge, in px at scale 1. Empty wrappers and padding are not counted.
OVERFLOW = """(tolerance) => {
  const scale = Reveal.getScale(), box = document.querySelector('.reveal .slides').getBoundingClientRect();
  const right = box.left + Reveal.getConfig().width * scale, bottom = box.top + Reveal.getConfig().height * scale;
  const slide = Reveal.getCurrentSlide(), out = [], range = document.createRange();
  const shown = el => {
    const css = getComputedStyle(el);
    return css.display !== 'none' && css.visibility !== 'hidden' && el.getClientRects().length > 0;
  };
  const check = (r, el, what) => {
    if (r.width === 0 || r.height === 0) return;
    const below = (r.bottom - bottom) / scale, past = (r.right - right) / scale;
    if (below > tolerance || past > tolerance) out.push({tag: el.tagName.toLowerCase(), what, below, past});
  };
  const walk = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const node = walk.currentNode, el = node.parentElement, text = node.textContent.trim();
    if (!text || el.closest('aside.notes, script, style, mjx-container') || !shown(el)) continue;
    range.selectNodeContents(node);
    check(range.getBoundingClientRect(), el, text.replace(/\\s+/g, ' ').slice(0, 50));
  }
  for (const el of slide.querySelectorAll('img, svg, canvas, video, iframe, mjx-container')) {
    if (el.closest('aside.notes') || (el.tagName === 'svg' && el.closest('mjx-container')) || !shown(el)) continue;
    check(el.getBoundingClientRect(), el, el.tagName === 'IMG' ? `image ${el.naturalWidth} x ${el.naturalHeight} px`
          : el.textContent.trim().slice(0, 50));
  }
  return out;
}"""
TOLERANCE_PX = 1        # rounding of layout at scale 1


@pytest.fixture(scope="module")
def page():
    with chromium() as p:
        yield p


@pytest.mark.parametrize("deck", DECKS, ids=[d.name for d in DECKS])
def test_every_slide_readable_at_1280x720(deck, page):
    html = executed(deck).html
    requests = []

    def asked(r):
        if not r.url.startswith(("file:", "data:", "blob:")):
            requests.append(r.url)
    page.on("request", asked)
    page.goto(html.as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady()")
    page.evaluate("() => Reveal.configure({fragments: false, transition: 'none'})")   # all fragments shown
    slides = page.evaluate("() => Reveal.getSlides().map(s => Reveal.getIndices(s))")
    small, small_figs, blank, with_figure, cut, cjk = [], [], [], [], [], []
    all_shots = os.environ.get("LABKIT_DECK_SHOTS") == "1"
    for n, ix in enumerate(slides, 1):
        found = len(small) + len(small_figs) + len(cut) + len(cjk)
        page.evaluate(f"() => Reveal.slide({ix['h']}, {ix['v'] or 0})")
        page.wait_for_timeout(50)
        m = page.evaluate(MEASURE)
        where = f"slide {n} ({m['title'][:40]})"
        over = sorted(page.evaluate(OVERFLOW, TOLERANCE_PX), key=lambda o: -max(o["below"], o["past"]))
        for o in over[:3]:                                    # the worst three of a slide
            side = " and ".join(([f"{o['below']:.0f} px below the bottom"] if o["below"] > TOLERANCE_PX else []) +
                                ([f"{o['past']:.0f} px past the right edge"] if o["past"] > TOLERANCE_PX else []))
            cut.append(f"{where}: <{o['tag']}> {o['what']!r} reaches {side}")
        if len(over) > 3:
            cut.append(f"{where}: ... and {len(over) - 3} more texts or pictures cut off")
        cjk += [f"{where}: {t['tag']} {t['text']!r}" for t in m["texts"] if t["cjk"]]
        small += [f"{where}: {t['px']:.1f} px {t['tag']} {t['text']!r}" for t in m["texts"] if t["px"] < BODY_PX - 0.01]
        for img in m["imgs"]:
            assert img["ok"], f"{deck.name} {where}: an image did not load"
            px = img["shown"] / img["natural"] * MIN_FONT_PT * DPI / 72
            if px < FIGURE_PX:
                small_figs.append(f"{where}: figure text {px:.1f} px (shown {img['shown']:.0f} of {img['natural']} px wide)")
        if all_shots or len(small) + len(small_figs) + len(cut) + len(cjk) > found:
            page.screenshot(path=str(shot_path(f"decks/{deck.stem}/{n:02d}.png")))
        if m["imgs"] and not with_figure:
            with_figure.append(n)
            v = variance(page.locator("section.present img").first.screenshot())
            if v < 100:
                blank.append(f"{where}: the figure is blank (pixel variance {v:.0f})")
    print(f"\n{deck.name}: {len(slides)} slides; screenshots of the slides with a problem (of every "
          f"slide with LABKIT_DECK_SHOTS=1) in {shot_path('decks/' + deck.stem)}")
    assert not cut, f"{deck.name}: slides that do not fit 1280 x 720 (content cut off):\n" + "\n".join(cut)
    assert not cjk, f"{deck.name}: Chinese on a slide (put it in the notes, or say it in English):\n" + "\n".join(cjk[:10])
    assert not small, f"{deck.name}: text under {BODY_PX} px:\n" + "\n".join(small[:15])
    assert not small_figs, f"{deck.name}: figures shrunk so their text is under {FIGURE_PX} px:\n" + "\n".join(small_figs)
    assert not blank, "\n".join(blank)
    page.remove_listener("request", asked)
    assert not requests, f"{deck.name} asked the network for {requests[:5]}"
