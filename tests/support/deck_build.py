"""The decks built ONCE per test session, executed, into build/slides (shared by test_slides.py
and the browser tests). A deck whose earlier build has the same key (the deck and
labkit/slides unchanged) is reused, so CI runs each deck exactly once and a rerun is free; a
lock per deck makes a second test process (a pytest-xdist worker) wait for the first's build
and reuse it rather than build it again.
The Chinese decks are built unexecuted into build/slides-zh the same way (`chinese`): by
test_i18n_deck.py in the parallel phase, reused by the browser test in the serial one."""
import contextlib
import os
import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DECKS = sorted((ROOT / "slides").glob("*.ipynb"))
OUT = ROOT / "build" / "slides"
OUT_ZH = ROOT / "build" / "slides-zh"
_built = {}
spent = {}      # seconds spent building, by the part of the test run that asked (tests/conftest.py)


@contextlib.contextmanager
def _locked(dst: pathlib.Path, deck: pathlib.Path):
    """The deck's build lock in `dst`, held for the block: a second test process (another
    pytest-xdist worker, or the serial phase beside the parallel one) waits, then reuses."""
    import fcntl
    dst.mkdir(parents=True, exist_ok=True)
    with open(dst / f".{deck.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)              # released when the file closes
        yield


def executed(deck: pathlib.Path):
    """labkit.course.decks.Built for `deck`, run in a fresh kernel (or reused, see above)."""
    from labkit.course.decks import build_deck, cached
    if deck.name not in _built:
        t0 = time.perf_counter()
        with _locked(OUT, deck):
            _built[deck.name] = cached(deck, OUT, True) or build_deck(deck, OUT, execute=True)
        asking = os.environ.get("PYTEST_CURRENT_TEST", "")
        part = "browser" if "test_browser" in asking else "decks"
        spent[part] = spent.get(part, 0.0) + time.perf_counter() - t0
    return _built[deck.name]


def chinese(deck: pathlib.Path):
    """labkit.course.decks.Built for `deck` in Chinese, not executed (or reused, see above; the
    lock as in `executed`: the serial phase's browser test may ask while test_i18n_deck.py builds)."""
    from labkit.course.decks import build_deck, cached
    with _locked(OUT_ZH, deck):
        return (cached(deck, OUT_ZH, False, "zh") or
                build_deck(deck, OUT_ZH, execute=False, cache=ROOT / "build" / "vendor", lang="zh"))
