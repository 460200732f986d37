"""Count the English sentences a Chinese learner still reads: run each Chinese learner copy top to
bottom and count, per notebook, the English sentences in its markdown and in what its cells print,
outside code, program words and quoted program text. The goal is 0 everywhere.

    .venv/bin/python -m labkit.exercises build notebooks build/learner-zh --lang zh
    .venv/bin/python scripts/english_left.py build/learner-zh [--only 00 04] [--show] [--no-run]

What counts as an English sentence: a stretch of a line with no Chinese character in it that holds
at least `WORDS` plain English words in a row (letters only; numbers between them neither count
nor break the row; a word with a digit, `_`, `.`, `/`, `=` or `()` is program text). Removed first: Markdown code (```...``` and `...`), LaTeX ($...$),
links' targets, text in quotes ('...', "...", “...”), tracebacks, and the program words (pass,
FAIL, ok:, MISS:, not implemented yet: the learner's own stubs say it). Figures are not read (their
text goes through the same catalog as the printed lines); `--show` prints every sentence found.
--no-run counts a notebook that has already been run (its saved outputs).
"""
import argparse
import pathlib
import re
import sys

import nbformat

WORDS = 3
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
PROGRAM_WORDS = re.compile(r"(?<![\w-])(?:pass|FAIL|MISS:|ok:|not implemented yet)(?![\w-])")
NUMBER = re.compile(r"^[~≈×x]?[\d.,:%/]+[a-zA-Z×%]{0,2}[,;:]?$")   # 0, 2.3x, 1.5×, 90 %: neither word nor break
WORD = re.compile(r"^[A-Za-z][a-z]*(?:['’-][A-Za-z]+)*[,;:!?]?$")
_STRIP = [
    re.compile(r"```.*?```", re.S), re.compile(r"`[^`\n]*`"), re.compile(r"\$\$.*?\$\$", re.S),
    re.compile(r"\$[^$\n]*\$"), re.compile(r"\]\([^)]*\)"), re.compile(r"<[^>\n]+>"),
    re.compile(r"'[^'\n]*'"), re.compile(r'"[^"\n]*"'), re.compile(r"“[^”\n]*”"),
    re.compile(r"https?://\S+"),
]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sentences(text: str) -> list:
    """The English sentences of `text` (see the module's docstring)."""
    text = _ANSI.sub("", text)
    for pat in _STRIP:
        text = pat.sub(" ", text)
    text = PROGRAM_WORDS.sub(" ", text)
    out = []
    for line in text.splitlines():
        for part in CJK.split(line):
            run, best = [], []
            for w in part.replace("(", " ( ").replace(")", " ) ").split():
                if WORD.match(w):
                    run.append(w)
                elif NUMBER.match(w):
                    continue
                else:
                    best, run = (run if len(run) > len(best) else best), []
            best = run if len(run) > len(best) else best
            if len(best) >= WORDS:
                out.append(" ".join(best))
    return out


def _printed(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            data = o.get("data", {})
            if "text/markdown" in data:
                parts.append(data["text/markdown"])
            elif "text/plain" in data and "image/png" not in data and "text/html" not in data:
                parts.append(data["text/plain"])
            elif "text/html" in data:
                parts.append(re.sub(r"<[^>]+>", " ", data["text/html"]))
        # errors: a traceback is program text
    return "\n".join(parts)


def count(nb) -> list:
    """(cell id, where, sentence) for every English sentence of a run notebook."""
    found = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found += [(cell.get("id"), "text", s) for s in sentences(cell.source)]
        elif cell.cell_type == "code":
            found += [(cell.get("id"), "output", s) for s in sentences(_printed(cell))]
    return found


def run(path: pathlib.Path, timeout: int):
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=pathlib.Path, help="the Chinese learner copies")
    ap.add_argument("--only", nargs="*", help="notebook prefixes, e.g. 00 04")
    ap.add_argument("--show", action="store_true", help="print every sentence found")
    ap.add_argument("--no-run", action="store_true", help="count saved outputs, do not run")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    ap.add_argument("--save", type=pathlib.Path, help="write the run notebooks here")
    a = ap.parse_args(argv)
    total = 0
    for path in sorted(a.folder.glob("*.ipynb")):
        if a.only and not any(path.name.startswith(p) for p in a.only):
            continue
        nb = nbformat.read(path, as_version=4) if a.no_run else run(path, a.timeout)
        if a.save:
            a.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, a.save / path.name)
        found = count(nb)
        text = sum(1 for f in found if f[1] == "text")
        print(f"{path.stem}: {len(found)} English sentences ({text} in text, {len(found) - text} printed)",
              flush=True)
        if a.show:
            for cell, where, s in found:
                print(f"    {cell} [{where}]: {s}")
        total += len(found)
    print(f"total: {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
