"""The decks built ONCE per test session, executed, into build/slides (shared by test_slides.py
and the browser tests). A deck whose earlier build has the same key (the deck and
labkit/slides unchanged) is reused, so CI runs each deck exactly once and a rerun is free."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DECKS = sorted((ROOT / "slides").glob("*.ipynb"))
OUT = ROOT / "build" / "slides"
_built = {}


def executed(deck: pathlib.Path):
    """labkit.slides.build.Built for `deck`, run in a fresh kernel (or reused, see above)."""
    from labkit.slides.build import build_deck, cached
    if deck.name not in _built:
        _built[deck.name] = cached(deck, OUT, True) or build_deck(deck, OUT, execute=True)
    return _built[deck.name]
