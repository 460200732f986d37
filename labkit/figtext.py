"""Text and figure sizes for library figures that follow the reader's matplotlib settings.

Library plots set their small text (numbers inside bars, legends, titles) in points chosen for
matplotlib's default ``font.size`` of 10. Through `size` that text grows with
``rcParams["font.size"]``: a notebook (10) looks as it always did, and a slide deck, whose
first cell calls `labkit.slides.style()` (16), gets text readable from the back of a room,
never smaller than `labkit.slides.MIN_FONT_PT`. `slides()` tells a plot that it is drawn for
slides, e.g. to break a long title into two lines or to take the deck's figure size.

    ax.set_title(title, fontsize=figtext.size(9))
    fig, ax = plt.subplots(figsize=figtext.figsize((6.5, 3.8)))
"""

BASE_PT = 10.0     # matplotlib's default font.size: the size the library's numbers were chosen for
SLIDES_MIN_PT = 14  # labkit.slides.MIN_FONT_PT (not imported: this module stays import-light)


def scale() -> float:
    """rcParams' font.size over matplotlib's default, at least 1."""
    import matplotlib
    return max(1.0, float(matplotlib.rcParams["font.size"]) / BASE_PT)


def slides() -> bool:
    """True when the text has been made larger than matplotlib's default (a slide deck)."""
    return scale() > 1.0


def size(pt: float) -> float:
    """`pt` (chosen at font.size 10) scaled to the current font.size; at least SLIDES_MIN_PT
    when scaled up, so no text on a slide falls below the decks' minimum."""
    k = scale()
    return pt if k == 1.0 else max(pt * k, SLIDES_MIN_PT)


def figsize(notebook: tuple, slides_size: tuple = None) -> tuple:
    """`notebook` as given at matplotlib's default text size; on slides `slides_size`, or the
    deck's figure size (rcParams["figure.figsize"], set by labkit.slides.style())."""
    if not slides():
        return notebook
    if slides_size is not None:
        return slides_size
    import matplotlib
    return tuple(matplotlib.rcParams["figure.figsize"])
