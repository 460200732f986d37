"""What a deck in slides/ imports: matplotlib's style for slides (`style()`, its sizes); and the
command that builds the decks to reveal.js, whose code is labkit.course.decks.

    import labkit.slides; labkit.slides.style()                   # a deck's first code cell
    python -m labkit.slides build --execute slides build/slides   # every deck, run once, to HTML

Each deck becomes ONE self-contained file, build/slides/<deck>.slides.html: reveal.js, its
speaker-notes plugin, the theme's font and (for decks with formulas) MathJax are inlined, and
figures are data: URIs, so an instructor can mail or copy a single file and present it with no
network. reveal.js and MathJax come from the npm registry once, at build time, into
build/vendor (labkit/course/vendor.py); nothing is loaded from a CDN when a deck is shown.
With --execute every cell runs in a fresh `labkit` kernel; an error in a cell not tagged
`raises-exception` is listed with its deck and cell, and the command exits 1.
"""
# Figures in a deck must stay readable from the back of a room: at 1280 x 720, figure text at
# least 16 px. A deck's first code cell calls style(); the browser test checks each figure's
# displayed scale against these numbers (MIN_FONT_PT at DPI, shrunk or grown by the page).
DPI = 100
MIN_FONT_PT = 14          # the smallest text style() allows (tick labels, legend)
FIGSIZE = (10.0, 4.2)     # inches: 1000 x 420 px at DPI, fits a slide under a title


def style() -> None:
    """Matplotlib settings for slides: large text, one size of figure, PNG at DPI.

    Library plots that set an explicit fontsize below MIN_FONT_PT defeat this: keep them at
    or above it (or scale them from rcParams)."""
    import matplotlib
    matplotlib.rcParams.update({
        "figure.figsize": FIGSIZE, "figure.dpi": DPI, "savefig.dpi": DPI,
        "font.size": 16, "axes.titlesize": 18, "axes.labelsize": 16,
        "xtick.labelsize": MIN_FONT_PT, "ytick.labelsize": MIN_FONT_PT,
        "legend.fontsize": MIN_FONT_PT, "legend.title_fontsize": MIN_FONT_PT,
        "figure.titlesize": 18, "lines.linewidth": 2.5,
    })


def build(src, dst, execute: bool = False, timeout: int = 180, reuse: bool = False, only=None) -> list:
    """Build every deck in `src` into `dst` (see labkit.course.decks.build); returns Built records."""
    from labkit.course.decks import build as _build
    return _build(src, dst, execute, timeout, reuse, only)
