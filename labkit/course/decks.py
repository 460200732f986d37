"""Decks (notebooks with slide metadata) to single-file reveal.js HTML, executed once.

`build_deck` runs a deck in a fresh `labkit` kernel (when asked), records every error that is
not in a cell tagged `raises-exception` (naming the deck and the cell), and writes
`<dst>/<deck>.slides.html` plus `<dst>/<deck>.build.json` (the errors, the time, a key). The
key hashes the deck, this package and (when executed) the rest of labkit, so the tests and the
browser checks reuse an executed build instead of running a deck twice (`cached`).
With ``lang="zh"`` the deck is built in Chinese: its translation (i18n/zh/slides/<deck>.po,
`labkit.course.translate`) applied first, and the key hashes that file and labkit's messages
(labkit/locale/zh/LC_MESSAGES/labkit.po) too.
"""
import copy
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import re
import time

from labkit.course import vendor

HERE = pathlib.Path(__file__).resolve().parent       # labkit/course; HERE.parent is labkit
DECK_FILES = ("decks.py", "vendor.py", "deck.css", "deck.html.j2")   # what a deck's HTML is made with
WIDTH, HEIGHT, MARGIN = 1280, 720, 0.0       # reveal's slide in px; margin 0: scale 1 on a 1280 x 720 screen
WIDGET = "application/vnd.jupyter.widget-view+json"


@dataclasses.dataclass
class Built:
    deck: str                      # file name of the deck, e.g. "00_cluster.ipynb"
    html: pathlib.Path
    errors: list                   # "00_cluster.ipynb cell 7 (id ab12): RankError: ..." per unexpected error
    seconds: float                 # time to execute (0 when not executed)
    executed: bool


def key(path: pathlib.Path, execute: bool, lang: str = "en") -> str:
    """The deck, this build's code, template and style (DECK_FILES), and (for an executed build)
    every module of labkit: a deck's figures and tables come from the library, so a changed plot
    rebuilds it."""
    h = hashlib.sha256(path.read_bytes())
    parts = sorted(p for p in HERE.iterdir() if p.name in DECK_FILES)
    if execute:
        parts += sorted(HERE.parent.rglob("*.py"))
    for part in parts:
        if part.suffix in (".py", ".css", ".j2"):
            h.update(str(part.relative_to(HERE.parent)).encode() + part.read_bytes())
    h.update(b"executed" if execute else b"as committed")
    if lang != "en":
        from labkit.course.translate import translation_path
        tr_file = translation_path(path, lang)
        h.update(lang.encode() + (tr_file.read_bytes() if tr_file.exists() else b"none"))
        from labkit.i18n.po import messages_po
        if execute and messages_po(lang).exists():
            h.update(messages_po(lang).read_bytes())
    return h.hexdigest()[:16]


def cached(path: pathlib.Path, dst: pathlib.Path, execute: bool, lang: str = "en"):
    """The Built of an earlier build of this exact deck (and this build's DECK_FILES), or None."""
    meta, html = dst / f"{path.stem}.build.json", dst / f"{path.stem}.slides.html"
    if not (meta.exists() and html.exists()):
        return None
    record = json.loads(meta.read_text())
    if record.get("key") != key(path, execute, lang):
        return None
    return Built(path.name, html, record["errors"], record["seconds"], record["executed"])


def tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def outline(nb) -> list:
    """One dict per slide (slide_type slide or subslide): its title, whether speaker notes
    follow it, whether a code cell on it draws (matplotlib or a labkit plotting call)."""
    slides = []
    for cell in nb["cells"]:
        kind, src = slide_type(cell), "".join(cell["source"])
        if kind in ("slide", "subslide") or (not slides and kind != "skip"):
            title = next((line.lstrip("# ") for line in src.splitlines() if line.startswith("#")), "")
            slides.append({"title": title, "notes": False, "plots": False, "cells": 0})
        if kind == "skip" or not slides:
            continue
        s = slides[-1]
        s["cells"] += 1
        s["notes"] |= kind == "notes"
        s["plots"] |= cell["cell_type"] == "code" and bool(re.search(
            r"\bplt\.|\.plot\(|figure|labkit\.show\.|_plot\(|gantt|explorer", src))
    return slides


def errors_of(nb, deck: str) -> list:
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        where = f"{deck} cell {i} (id {cell.get('id', '?')})"
        errs = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if "raises-exception" in tags(cell):
            if not errs:
                found.append(f"{where}: tagged raises-exception but ran without an error")
        for o in errs if "raises-exception" not in tags(cell) else []:
            first = (o.get("evalue") or "").strip().splitlines()[:1]
            found.append(f"{where}: {o.get('ename')}: {first[0] if first else ''}")
    return found


def _execute(nb, cwd: pathlib.Path, timeout: int) -> list:
    from nbconvert.preprocessors import ExecutePreprocessor
    try:
        ExecutePreprocessor(timeout=timeout, kernel_name="labkit", allow_errors=True).preprocess(
            nb, {"metadata": {"path": str(cwd)}})
    except Exception as exc:                  # a cell over `timeout`, a dead kernel: report, keep going
        return [f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"]
    return []


def _static(nb):
    """The deck as shown: widget views dropped (a static page has no kernel behind them), and an
    error shown as its message only (for a RankError that holds the ranks' tracebacks): the
    notebook-side frames repeat the cell's code, which is on the slide already."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = [o for o in cell.get("outputs", []) if WIDGET not in o.get("data", {})]
            for o in cell["outputs"]:
                if o.get("output_type") == "error":
                    o["traceback"] = o.get("traceback", [])[-1:]
    nb["metadata"].pop("widgets", None)
    return nb


def _has_math(nb) -> bool:
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    text += "\n".join(json.dumps(o.get("data", {}).get("text/markdown", ""))
                      for c in nb["cells"] for o in c.get("outputs", []))
    return bool(re.search(r"\$[^$\s][^$]*\$|\\\(|\\\[", text))


@functools.lru_cache(maxsize=1)
def _exporter():
    """One exporter per process: its templates compile once (about 1 s a deck otherwise)."""
    from nbconvert import SlidesExporter
    return SlidesExporter(template_file=str(HERE / "deck.html.j2"))


def export(nb, title: str, deck_key: str, cache: pathlib.Path, lang: str = "en") -> str:
    exporter = _exporter()
    labkit = dict(vendor.assets(cache, _has_math(nb)), key=deck_key, title=title,
                  lang={"zh": "zh-Hans"}.get(lang, lang),
                  deck_css=(HERE / "deck.css").read_text(), width=WIDTH, height=HEIGHT, margin=MARGIN)
    html, _ = exporter.from_notebook_node(_static(nb), resources={"labkit": labkit})
    return html


def build_deck(path: pathlib.Path, dst: pathlib.Path, execute: bool = False, timeout: int = 180,
               cache: pathlib.Path = None, lang: str = "en") -> Built:
    import sys
    import nbformat
    from labkit.course.translate import in_language
    cache = vendor.fetch(cache or pathlib.Path(os.environ.get("LABKIT_VENDOR") or dst.parent / "vendor"))
    nb, notes = in_language(nbformat.read(path, as_version=4), path, lang)
    for line in notes:
        print(line, file=sys.stderr)
    t0, errors = time.perf_counter(), []
    if execute:
        notebooks = path.resolve().parent.parent / "notebooks"
        errors = _execute(nb, notebooks if notebooks.is_dir() else path.parent, timeout)
        errors = [f"{path.name}: {e}" for e in errors] + errors_of(nb, path.name)
    seconds = time.perf_counter() - t0 if execute else 0.0
    slides = outline(nb)
    title = slides[0]["title"] if slides and slides[0]["title"] else path.stem
    dst.mkdir(parents=True, exist_ok=True)
    html = dst / f"{path.stem}.slides.html"
    html.write_text(export(nb, title, key(path, execute, lang), cache, lang))
    (dst / f"{path.stem}.build.json").write_text(json.dumps(
        {"key": key(path, execute, lang), "errors": errors, "seconds": round(seconds, 1), "executed": execute}, indent=1))
    return Built(path.name, html, errors, seconds, execute)


def build(src: pathlib.Path, dst: pathlib.Path, execute: bool = False, timeout: int = 180,
          reuse: bool = False, only=None, lang: str = "en") -> list:
    """Build every deck `src/*.ipynb` (or those whose name starts with one of `only`) into `dst`;
    with `reuse`, a deck whose earlier build has the same key is not run again."""
    out = []
    for path in sorted(pathlib.Path(src).glob("*.ipynb")):
        if only and not any(path.name.startswith(o) for o in only):
            continue
        out.append((reuse and cached(path, pathlib.Path(dst), execute, lang))
                   or build_deck(path, pathlib.Path(dst), execute, timeout, lang=lang))
    return out
