"""What every notebook tool pays to start: importing nbformat (each pytest worker running nbval,
`python -m labkit.exercises build`, nbconvert) and Jupyter's event schemas (each Jupyter server,
JupyterHub, every nbgrader command) imports jsonschema.

jsonschema 4.25 and later import rfc3987-syntax with the format-nongpl extra, which builds about
35 Lark parsers at import: about 0.9 s of CPU in each of those processes (54 of them in one run of
scripts/test). pyproject.toml keeps jsonschema below 4.25; this test fails when that parser
library comes back, or when the import costs as much as torch's again, in one run (a ratio).
"""
import json
import subprocess
import sys

import pytest

PROBE = """
import json, resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0 = cpu()
exec(sys.argv[1])
print(json.dumps({"cpu": cpu() - c0, "modules": sorted(sys.modules)}))
"""


def probe(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", ["import nbformat; nbformat.validator.get_validator()",
                                  "import jupyter_events.validators"])
def test_the_notebook_tools_import_no_iri_parsers(code):
    pytest.importorskip(code.split()[1].split(";")[0])
    loaded = [m for m in probe(code)["modules"] if m.split(".")[0] in ("rfc3987_syntax", "lark")]
    assert not loaded, (
        f"`{code}` imported {loaded[:3]}: jsonschema's format-nongpl extra builds rfc3987-syntax's "
        "Lark parsers as it is imported (about 0.9 s of CPU in every notebook tool's process). "
        "Keep jsonschema below 4.25 (pyproject.toml) or find what brought the parsers back.")


def test_nbformat_imports_in_a_fraction_of_torchs_time():
    """CPU seconds of `import nbformat` (and its schema validator) against `import torch`, each in a
    fresh process, the fastest of 3 each: 0.15-0.2 with jsonschema 4.24, about 1 with 4.26."""
    nb = min(probe("import nbformat; nbformat.validator.get_validator()")["cpu"] for _ in range(3))
    torch = min(probe("import torch")["cpu"] for _ in range(3))
    assert nb <= 0.5 * torch, (f"importing nbformat took {nb:.2f} CPU-s, {nb / torch:.2f}x importing torch "
                               f"({torch:.2f} CPU-s; allowed 0.5x): something heavy is imported with it "
                               "(python -X importtime -c 'import nbformat' says what)")
