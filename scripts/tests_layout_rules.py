"""The rules and text rewrites of scripts/tests_layout.py (read its docstring): where a test file
goes, and how a file's text changes when it moves. Pure functions of text, except where noted."""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
SUPPORT = "support"
STAY = {"conftest.py", "README.md", "__init__.py"}        # and every folder (check_corpus/, ...)

# (file name pattern, folder): the first match wins. The checkers' tests (labkit/check/) all go
# to check/, whichever of the two names they have (test_check_<x>.py, test_<x>_check.py).
RULES = [
    ("test_browser_*.py", "browser"),
    ("test_i18n*.py", "i18n"),
    ("test_gpu_check*.py", "gpu"), ("test_device_factories*.py", "gpu"),
    ("test_check_*.py", "check"), ("test_*_check.py", "check"),
    ("test_runtime*.py", "runtime"), ("test_portable*.py", "runtime"), ("test_slurm*.py", "runtime"),
    ("test_hub*.py", "runtime"), ("test_bench*.py", "runtime"), ("test_zygote*.py", "runtime"),
    ("test_zero_live.py", "memory"),                       # labkit.memory.live, no ranks
    ("test_ddp*.py", "ddp"), ("test_zero*.py", "zero"), ("test_fsdp*.py", "fsdp"),
    ("test_tp*.py", "tp"), ("test_pipeline*.py", "pipeline"), ("test_cp*.py", "cp"),
    ("test_moe*.py", "moe"), ("test_tricks*.py", "tricks"), ("test_plan*.py", "plan"),
    ("test_memory*.py", "memory"), ("test_comm*.py", "comm"), ("test_ring*.py", "comm"),
    ("test_capstone*.py", "capstone"), ("test_grading*.py", "grading"),
    ("test_parallel_dims*.py", "nd"), ("test_clipping*.py", "nd"),      # labkit/nd/: what spans dimensions
    ("test_diagnose*.py", "throughput"), ("test_throughput*.py", "throughput"),
    ("test_doctor*.py", "pitfalls"), ("test_pitfalls*.py", "pitfalls"),
    ("test_exercises*.py", "course"), ("test_slide*.py", "course"), ("test_figtext*.py", "course"),
    ("test_notebooks*.py", "course"), ("test_course*.py", "course"),
    ("test_layers*.py", "repo"), ("test_ci_*.py", "repo"), ("test_setup*.py", "repo"),
    ("test_verdicts*.py", "repo"), ("test_moved_names*.py", "repo"),
    ("test_numerics*.py", "core"), ("test_versions*.py", "core"), ("test_tables*.py", "core"),
    ("test_show*.py", "core"), ("test_trace*.py", "core"), ("test_machine*.py", "core"),
    ("test_notes_items*.py", "core"), ("test_livefig*.py", "core"), ("test_models*.py", "core"),
]

FILE_PATH = r"(?:pathlib\.)?Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?"


def ruled(name: str) -> str | None:
    """The folder RULES give `name` (None: no pattern matches)."""
    for pattern, folder in RULES:
        if fnmatch.fnmatchcase(name, pattern):
            return folder
    return None


def folder_for(name: str, folders: set[str]) -> str | None:
    if folder := ruled(name):
        return folder
    for folder in sorted(folders, key=len, reverse=True):     # a folder made by hand attracts its tests
        if folder != SUPPORT and (name == f"test_{folder}.py" or name.startswith(f"test_{folder}_")):
            return folder
    if name.endswith(".py") and not name.startswith("test_"):
        return SUPPORT                                        # a helper
    return None


def modulo_folder(nodeid: str) -> str:
    return re.sub(r"^tests/[^/:]+/(?=[^/:]+\.py::)", "tests/", nodeid)


# --- step 3: paths from __file__ in a moved file ---------------------------------------------------
def deeper(text: str, own: str, where: dict[str, str], report: list[str], name: str) -> str:
    """`text` of a file that moved from tests/ to tests/<own>/, its __file__ paths one level deeper."""
    text = re.sub(FILE_PATH + r"\.parents\[(\d+)\]",
                  lambda m: m.group(0)[: m.start(1) - m.start(0)] + f"{int(m.group(1)) + 1}]", text)
    text = re.sub("(" + FILE_PATH + r")((?:\.parent){2,})(?!\w)",
                  lambda m: m.group(1) + m.group(2) + ".parent", text)
    text = re.sub(r"os\.path\.join\(os\.path\.dirname\(__file__\), (['\"])\.\.\1, ",
                  lambda m: m.group(0) + f"{m.group(1)}..{m.group(1)}, ", text)

    def sibling(m):
        file, folder = m.group(3), where.get(m.group(3))
        if folder is None or folder == own:
            return m.group(0)
        return f"{m.group(1)}.parents[1] / {m.group(2)}{folder}{m.group(2)} / {m.group(2)}{file}{m.group(2)}"
    text = re.sub("(" + FILE_PATH + r")\.with_name\((['\"])([\w.]+)\2\)", sibling, text)

    # a test module of another folder: that folder on sys.path in place of the file's own one
    imported = set(re.findall(r"^\s*(?:from|import) (test_\w+)\b", text, re.M))
    others = sorted({where[m + ".py"] for m in imported if where.get(m + ".py") not in (None, own)})
    if others:
        own_line = re.compile(r"^sys\.path\.insert\(0, str\(" + FILE_PATH + r"\.parent\)\)\n", re.M)
        m = own_line.search(text)
        if m:
            call = m.group(0)[: m.group(0).index("Path(__file__)")]
            lines = "".join(f'{call}Path(__file__).resolve().parents[1] / "{f}"))\n' for f in others)
            text = text[: m.start()] + lines + text[m.end():]
        else:
            report.append(f"tests/{own}/{name}: imports a test module from tests/{', tests/'.join(others)}/: "
                          "put that folder on sys.path by hand")
    return text


def left_to_read(before: str, after: str, path: str) -> list[str]:
    """Lines with __file__ that step 3 did not change (and that are not one of its own)."""
    out = []
    changed = set(after.splitlines()) - set(before.splitlines())
    for i, line in enumerate(after.splitlines(), 1):
        if re.search(r"(?<![\w.])__file__", line) and line not in changed and not re.search(
                r"sys\.path\.insert\(0, (str\(" + FILE_PATH + r"\.parent\)|\{os\.path\.dirname\(__file__\)!r\})\)", line):
            out.append(f"{path}:{i}: {line.strip()}")
    return out


def repo_meant(text: str) -> str:
    """In a file already in a folder: ``parents[1] / "labkit"`` (tests/labkit, not there) where the
    repository's labkit/ is meant -> ``parents[2] / "labkit"`` (a line that a branch begun before
    the move brings into a moved file). Also ``.parent.parent`` and ``.joinpath("labkit", ...)``."""
    def fix(m):
        name = m.group(5) or m.group(7)
        if (TESTS / name).exists() or not (ROOT / name).exists():
            return m.group(0)
        return m.group(1) + (".parents[2]" if m.group(2).startswith(".parents") else ".parent.parent.parent") + m.group(3)
    return re.sub("(" + FILE_PATH + r")(\.parents\[1\]|\.parent\.parent)(?!\.parent)"
                  r"(\s*/\s*(['\"])([\w.-]+)\4|\.joinpath\((['\"])([\w.-]+)\6)", fix, text)


def shallow(folders: set[str]) -> list[str]:
    """Lines of files already in a folder that reach tests/ from __file__ and go on to what is not in
    tests/ (a branch merged after the move may bring ``parents[1]`` meaning the repository)."""
    into = "|".join(map(re.escape, sorted(folders | {"check_corpus"})))
    up = re.compile(FILE_PATH + r"(\.parents\[1\]|\.parent\.parent)(?!\.parent)(?!\s*/\s*['\"](" + into + r")['\"])")
    out = []
    for p in sorted(TESTS.glob("*/*.py")):
        if p.parent.name == "check_corpus":
            continue
        for i, line in enumerate((read(p) or "").splitlines(), 1):
            if up.search(line):
                out.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    return out


# --- step 4: helpers from the package `support` ----------------------------------------------------
def helper_imports(text: str, helpers: set[str]) -> str:
    if not helpers:
        return text
    names = "|".join(sorted(map(re.escape, helpers)))
    text = re.sub(rf"^([ \t]*)from ({names}) import ", rf"\1from {SUPPORT}.\2 import ", text, flags=re.M)
    text = re.sub(rf"^([ \t]*)import ({names})(\s+as\s+\w+)?[ \t]*(#.*)?$",
                  lambda m: f"{m.group(1)}from {SUPPORT} import {m.group(2)}{m.group(3) or ''}"
                            + (f"  {m.group(4)}" if m.group(4) else ""), text, flags=re.M)
    text = re.sub(rf"sys\.modules(\.get\(|\[)(['\"])({names})\2", rf"sys.modules\1\2{SUPPORT}.\3\2", text)
    return text


# --- step 5: paths named in text -------------------------------------------------------------------
PATH = re.compile(r"(?<![\w.-])tests/(?:(?P<folder>\w+)/)?(?P<stem>[\w*]+)(?P<py>\.py)?(?![\w/*])")


def named_paths(text: str, where: dict[str, str], report: list[str], path: str) -> str:
    def new(m):
        stem, py, was = m.group("stem"), m.group("py") or "", m.group("folder")
        if was == "check_corpus" or (was and (TESTS / was / (stem + ".py")).exists()):
            return m.group(0)                               # a path that is right
        if "*" in stem:
            matched = {f for n, f in where.items() if fnmatch.fnmatchcase(n, stem + (py or "*"))}
            if len(matched) > 1:
                report.append(f"{path}: {m.group(0)} spans tests/{', tests/'.join(sorted(matched))}/")
            return f"tests/{matched.pop()}/{stem}{py}" if len(matched) == 1 else m.group(0)
        folder = where.get(stem + ".py")
        return f"tests/{folder}/{stem}{py}" if folder else m.group(0)
    return PATH.sub(new, text)


def read(p: Path) -> str | None:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
