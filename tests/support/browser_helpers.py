"""Helpers for the browser tests: Debian's chromium driven by playwright, JupyterLab on a free
loopback port with a random token, and where the screenshots go.

Nothing is downloaded at test time: playwright drives the system chromium
(`chromium.launch(executable_path=...)`), never a browser of its own (`playwright install`).
"""
import contextlib
import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from labkit.runtime.ports import free_port      # (below the ephemeral range: no port race)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "browser"           # screenshots: test artefacts, kept after the run
CHROMIUM = os.environ.get("LABKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ENABLE = ("browser tests need Debian's chromium and the playwright package: "
          "`apt-get install chromium` and `.venv/bin/pip install -e '.[test]'`")


def missing() -> str:
    """Why the browser tests cannot run here ('' when they can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no playwright"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM}"
    return ""


def shot_path(name: str) -> pathlib.Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS / name


@contextlib.contextmanager
def chromium(viewport=(1280, 720)):
    """A chromium page (system browser, headless) at `viewport`."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


@contextlib.contextmanager
def jupyterlab(root: pathlib.Path, settings: dict = None):
    """JupyterLab serving `root` on a free loopback port with a random token; yields its base URL
    (token included as a query string for the first page). Its settings, workspaces and runtime
    files live in a temporary folder, so a learner's own JupyterLab settings play no part;
    `settings` maps a settings file (e.g. "@jupyterlab/notebook-extension/tracker.jupyterlab-settings")
    to its values."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="labkit-lab-"))
    for name, values in (settings or {}).items():
        (tmp / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "settings" / name).write_text(json.dumps(values))
    port, token = free_port(), secrets.token_hex(16)
    (tmp / "config").mkdir()                        # its kernels' ports from below the ephemeral range
    (tmp / "config" / "jupyter_server_config.py").write_text(
        "from labkit.runtime.ports import jupyter_kernel_ports\njupyter_kernel_ports()\n")
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"))
    cmd = [str(pathlib.Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.user_settings_dir={tmp / 'settings'}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
           "--ServerApp.open_browser=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")                  # CI containers run as root
    log_path = shot_path("jupyterlab-server.log")     # kept with the screenshots
    log = open(log_path, "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not answer within 60 s")
                time.sleep(0.2)
        yield base, token, tmp / "runtime"      # (the kernels' connection files: kernel-*.json)
    finally:
        server.terminate()                          # shuts its kernels down (and their ranks)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def variance(png: bytes) -> float:
    """Pixel variance of a PNG (grey levels 0..255): 0 for a blank picture."""
    import io

    import matplotlib.image
    img = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3].mean(axis=-1) * 255
    return float(img.var())
