"""Text and figure sizes for the library's pictures: as laid out for a notebook, larger on a slide.

The plot functions were laid out at matplotlib's default `font.size` (10 pt), with smaller text
for ticks, legends and labels on bars. A deck's first cell calls `labkit.slides.style()`, which
raises `font.size` to 16 and wants no text under `labkit.slides.MIN_FONT_PT` (14 pt at 100 dpi,
19 px on a 1280 x 720 slide). So a plot asks `size(8)` where it used to write `fontsize=8`:

    size(8)          # 8 in a notebook; on a slide max(8 x 16 / 10, MIN_FONT_PT) = 14
    figsize(6.4, 4)  # (6.4, 4) in a notebook; on a slide style()'s 10 x 4.2 in (panels stacked
                     # in rows keep their proportion, up to 6 in tall)

Nothing changes in a notebook (rcParams at matplotlib's defaults), the decks get text that reads
from the back of a room.
"""
BASE_PT = 10.0          # matplotlib's default font.size: the notebook sizes were chosen at it


def scale() -> float:
    """rcParams["font.size"] / 10: 1 in a notebook, 1.6 after labkit.slides.style()."""
    import matplotlib
    return float(matplotlib.rcParams["font.size"]) / BASE_PT


def on_slide() -> bool:
    return scale() > 1.0


def size(pt: float) -> float:
    """A notebook font size in points, scaled for a slide and never under MIN_FONT_PT there."""
    s = scale()
    if s <= 1.0:
        return pt
    from labkit.slides import MIN_FONT_PT
    return max(pt * s, float(MIN_FONT_PT))


def figsize(width: float, height: float, max_height: float = 6.0) -> tuple:
    """A notebook figure size (inches). On a slide: the size style() set (10 x 4.2 in: a
    reveal.js slide is 960 px wide, so a wider figure would be shrunk and its text with it);
    a figure whose notebook proportion is clearly taller (height > 0.65 x width: panels stacked
    in rows) keeps its proportion at that width, up to `max_height`."""
    if not on_slide():
        return (width, height)
    import matplotlib
    w, h = matplotlib.rcParams["figure.figsize"]
    if height > 0.65 * width:
        return (w, min(max(h, w * height / width), max_height))
    return (w, h)
