"""scripts/install-torch (run by scripts/setup): which index torch comes from, for real.

Two package indexes on loopback stand in for PyTorch's CPU index and for PyPI; each serves one
tiny wheel named torch (2.13.0+cpu and 2.13.0) with its metadata. The script runs real pip with
`--dry-run --report`, so the report says which index pip took torch from, nothing is installed
and nothing leaves this machine. pip's own configuration is left out (PIP_CONFIG_FILE=/dev/null)
so only these two indexes are seen.
"""
import glob
import hashlib
import http.server
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "install-torch"
HAS_GPU = bool(glob.glob("/dev/nvidia[0-9]*"))


def _wheel(folder: pathlib.Path, version: str) -> str:
    """A wheel named torch that holds only its metadata: enough for pip to resolve it."""
    name = f"torch-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n"
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(folder / name, "w") as z:
        z.writestr(f"{info}/METADATA", meta)
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    (folder / f"{name}.metadata").write_text(meta)
    digest = hashlib.sha256(meta.encode()).hexdigest()
    return f'<a href="/files/{name}" data-dist-info-metadata="sha256={digest}">{name}</a>'


class _Index:
    """A PEP 503 index on loopback serving one torch wheel; it records the paths asked for."""

    def __init__(self, folder: pathlib.Path, version: str):
        (folder / "files").mkdir(parents=True)
        link = _wheel(folder / "files", version)
        (folder / "torch").mkdir()
        (folder / "torch" / "index.html").write_text(f"<html><body>{link}</body></html>")
        self.asked = []
        index = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(folder), **k)

            def log_message(self, *args):
                index.asked.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("indexes")
    cpu, pypi = _Index(tmp / "cpu", "2.13.0+cpu"), _Index(tmp / "pypi", "2.13.0")
    yield cpu, pypi
    cpu.close()
    pypi.close()


def _install(tmp_path, pypi, cpu_index: str, path_extra: str = None, probe_s: str = "1"):
    """Run the script as scripts/setup does, pip in --dry-run; (its line, URL pip chose, seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=pypi.url, PIP_NO_CACHE_DIR="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", LABKIT_TORCH="2.13.0",
               LABKIT_TORCH_CPU_INDEX=cpu_index, LABKIT_TORCH_PROBE_S=probe_s)
    if path_extra:
        env["PATH"] = path_extra + os.pathsep + env["PATH"]
    report = tmp_path / "report.json"
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(SCRIPT), sys.executable, "--dry-run", "--ignore-installed",
                        "--no-deps", "--report", str(report)],
                       capture_output=True, text=True, timeout=120, env=env)
    seconds = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("labkit:")]
    assert len(lines) == 1, p.stdout
    chosen = json.loads(report.read_text())["install"]
    assert [c["metadata"]["name"] for c in chosen] == ["torch"], chosen
    return lines[0], (chosen[0]["download_info"]["url"], chosen[0]["metadata"]["version"]), seconds


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA GPU: the script rightly takes PyPI")
def test_no_gpu_takes_the_cpu_index(tmp_path, indexes):
    cpu, pypi = indexes
    line, url, _ = _install(tmp_path, pypi, cpu.url)
    assert "CPU build, from PyTorch's CPU index" in line and cpu.url in line, line
    assert url[0].startswith(cpu.url) and url[1] == "2.13.0+cpu", url


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers (as a firewall that drops them)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA GPU: the script rightly takes PyPI")
def test_unreachable_cpu_index_falls_back_to_pypi_within_seconds(tmp_path, indexes, silent_port):
    """The index accepts the connection and never answers: the worst case (a refused connection
    or an unknown host, as on the course's machines, fail at once)."""
    cpu, pypi = indexes
    dead = f"http://127.0.0.1:{silent_port}/whl/cpu"
    line, url, seconds = _install(tmp_path, pypi, dead, probe_s="1")
    assert f"PyTorch's CPU index {dead} cannot be reached" in line and "from PyPI" in line, line
    assert "no answer within 1 s" in line or "timed out" in line, line
    assert url[0].startswith(pypi.url) and url[1] == "2.13.0", url
    assert seconds < 15, f"the fallback took {seconds:.1f} s (the probe may take 1 s, pip a few)"


def test_gpu_takes_pypi_without_asking_the_cpu_index(tmp_path, indexes):
    cpu, pypi = indexes
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    (fake / "nvidia-smi").chmod(0o755)
    before = len(cpu.asked)
    line, url, _ = _install(tmp_path, pypi, cpu.url, path_extra=str(fake))
    assert "NVIDIA GPU found" in line and "from PyPI" in line, line
    assert url[0].startswith(pypi.url) and url[1] == "2.13.0", url
    assert len(cpu.asked) == before, cpu.asked[before:]
