"""The compiled catalog (labkit/i18n/mo.py): labkit.po as the .mo the standard library's gettext
reads, built into the wheel by the package's build (setup.py) and in place by scripts/setup,
never committed. It holds what msgfmt puts in a .mo, labkit reads the same messages from it as
from the .po, and a .mo built from another version of the .po is not read."""
import gettext
import pathlib
import shutil
import subprocess
import sys
import zipfile

import polib
import pytest

from labkit.i18n import messages as M
from labkit.i18n import mo as MO

ROOT = pathlib.Path(__file__).resolve().parents[2]
PO = ROOT / "labkit" / "locale" / "zh" / "LC_MESSAGES" / "labkit.po"


def _table(data: bytes) -> dict:
    import io
    cat = gettext.GNUTranslations(io.BytesIO(data))._catalog
    cat.pop("", None)                          # the header (ours names the .po's hash)
    return cat


def test_the_mo_holds_what_msgfmt_puts_in_it(tmp_path):
    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        pytest.skip("msgfmt not installed here (Debian/Ubuntu: apt-get install gettext)")
    subprocess.run([msgfmt, "-o", str(tmp_path / "ref.mo"), str(PO)], check=True)
    assert _table(MO.compile_po(PO)) == _table((tmp_path / "ref.mo").read_bytes())


def test_labkit_reads_the_same_catalog_from_the_mo_as_from_the_po(tmp_path):
    po = tmp_path / "labkit.po"
    shutil.copy(PO, po)
    MO.compile_po(po, po.with_suffix(".mo"))
    from_mo = M._load_mo(po.with_suffix(".mo"), po)
    assert from_mo is not None and dict(from_mo) == dict(M.load_po(po))
    assert len(from_mo) > 1000 and from_mo.plural(5) == 0         # Chinese: one plural form
    assert dict(M.load("zh", po)) == dict(from_mo)


def test_a_stale_mo_is_not_read(tmp_path):
    po = tmp_path / "labkit.po"
    shutil.copy(PO, po)
    MO.compile_po(po, po.with_suffix(".mo"))
    p = polib.pofile(str(po))
    e = next(e for e in p if e.msgid == "{ranks} ranks ready, {where}")
    e.msgstr = "{ranks} 个 rank 就绪了，{where}"          # a translator's edit, not compiled
    p.save(str(po))
    assert M._load_mo(po.with_suffix(".mo"), po) is None
    assert M.load("zh", po)[e.msgid] == "{ranks} 个 rank 就绪了，{where}"


def test_the_wheel_carries_the_compiled_catalog(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "labkit", src / "labkit", ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next((tmp_path / "dist").glob("labkit-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        data = z.read("labkit/locale/zh/LC_MESSAGES/labkit.mo")
    assert data == MO.compile_po(PO)
    assert MO.is_current(gettext.GNUTranslations(__import__("io").BytesIO(data)).info(), PO)
