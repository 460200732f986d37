"""The decks built ONCE per test session, executed, into build/slides (shared by test_slides.py
and the browser tests). A deck whose earlier build has the same key (the deck and
labkit/slides unchanged) is reused, so CI runs each deck exactly once and a rerun is free; a
lock per deck makes a second test process (a pytest-xdist worker) wait for the first's build
and reuse it rather than build it again.
The Chinese decks are built unexecuted into build/slides-zh the same way (`chinese`): by
test_i18n_deck.py in the parallel phase, reused by the browser test in the serial one."""
import os
import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DECKS = sorted((ROOT / "slides").glob("*.ipynb"))
OUT = ROOT / "build" / "slides"
OUT_ZH = ROOT / "build" / "slides-zh"
_built = {}
spent = {}      # seconds spent building, by the part of the test run that asked (tests/conftest.py)


def executed(deck: pathlib.Path):
    """labkit.course.decks.Built for `deck`, run in a fresh kernel (or reused, see above)."""
    import fcntl
    from labkit.course.decks import build_deck, cached
    if deck.name not in _built:
        t0 = time.perf_counter()
        OUT.mkdir(parents=True, exist_ok=True)
        with open(OUT / f".{deck.stem}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes
            _built[deck.name] = cached(deck, OUT, True) or build_deck(deck, OUT, execute=True)
        asking = os.environ.get("PYTEST_CURRENT_TEST", "")
        part = "browser" if "test_browser" in asking else "decks"
        spent[part] = spent.get(part, 0.0) + time.perf_counter() - t0
    return _built[deck.name]


def chinese(deck: pathlib.Path):
    """labkit.course.decks.Built for `deck` in Chinese, not executed (or reused, see above; the
    lock as in `executed`: the serial phase's browser test may ask while test_i18n_deck.py builds)."""
    import fcntl
    from labkit.course.decks import build_deck, cached
    OUT_ZH.mkdir(parents=True, exist_ok=True)
    with open(OUT_ZH / f".{deck.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)              # released when the file closes
        return (cached(deck, OUT_ZH, False, "zh") or
                build_deck(deck, OUT_ZH, execute=False, cache=ROOT / "build" / "vendor", lang="zh"))
