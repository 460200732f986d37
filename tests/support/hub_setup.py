"""A real JupyterHub for tests/runtime/test_hub.py: started as root on free loopback ports with its
proxy (configurable-http-proxy from npm), PAM logins and the local-process spawner, and the
clients a learner's browser would be: a login over HTTP, the hub's REST API, and a kernel
driven through the single-user server's websocket.

The hub and the proxy are installed by `.ci/run` (pip extra ``hub``, npm into build/hub);
`missing()` says in one line what is not there, for the skip.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

from labkit.runtime.ports import free_ports     # (below the ephemeral range: no port race)

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHP = ROOT / "build" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"


def proxy_command() -> str | None:
    return str(CHP) if CHP.exists() else shutil.which("configurable-http-proxy")


def missing() -> str | None:
    """Why a hub cannot be started here, in one line (None: it can)."""
    for module in ("jupyterhub", "pamela", "websocket", "requests"):
        try:
            __import__(module)
        except ImportError as e:
            return (f"{module} is not installed ({e}): pip install -e '.[hub]' (.ci/run does), then "
                    "npm install configurable-http-proxy into build/hub")
    if shutil.which("node") is None or proxy_command() is None:
        return ("no configurable-http-proxy: `npm install --prefix build/hub "
                "configurable-http-proxy@5.3.0` (.ci/run does; needs node and npm)")
    return None


def set_password(user: str, password: str) -> None:
    subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True, timeout=30)


def lock_password(user: str) -> None:
    subprocess.run(["usermod", "--lock", user], check=True, capture_output=True, timeout=30)


CONFIG = """\
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/cookie_secret"
c.ConfigurableHTTPProxy.command = ["{chp}"]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.pid_file = "{state}/proxy.pid"
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {users!r}
c.Spawner.cmd = {cmd!r}
c.Spawner.environment = {environment!r}
CPUS = {cpus!r}
c.Spawner.environment["LABKIT_CPUS"] = lambda spawner: CPUS[spawner.user.name]
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 90
c.Spawner.start_timeout = 90
from labkit.runtime.ports import free_port     # each server's port from below the ephemeral range


def _port(spawner):                            # (JupyterHub's own choice binds port 0: a race)
    spawner.port = free_port()


c.Spawner.pre_spawn_hook = _port
"""

# What each learner's server runs first, as that learner: their own copy of the course (only the
# notebooks they do not have yet), then the single-user server on the cores given to this learner
# (LABKIT_CPUS, set per user by the spawner). The same file as in docs/teaching.md, with the
# course folder and the Python filled in.
START = """\
#!/bin/sh
set -e
"{python}" -m labkit.exercises build "{course}" "$HOME/course" --keep >/dev/null
exec taskset -c "$LABKIT_CPUS" "{python}" -m jupyterhub.singleuser "$@"
"""


class Hub:
    """JupyterHub as a child of the test (root); `stop()` ends it, its proxy and every server
    it spawned. In `folder` (0711) only the start script, which the learners run; the hub's
    configuration, database, cookie secret and log in folder/state (0700)."""

    def __init__(self, folder: pathlib.Path, cpus: dict[str, str], python: str, kernels: str, environment=None):
        self.folder = folder / "state"
        self.folder.mkdir(mode=0o700, parents=True)
        os.chmod(folder, 0o711)                     # users can run the script, not list the folder
        start = folder / "start-singleuser"
        start.write_text(START.format(python=python, course=ROOT / "notebooks"))
        start.chmod(0o755)
        self.port, hub_port, api_port = free_ports(3)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JUPYTER_PATH": kernels,
               "LANG": "C.UTF-8", **(environment or {}),     # more: tests/runtime/test_hub_grading.py
               "LABKIT_ZYGOTE_IDLE": "5"}   # a learner's zygote ends 5 s after their last kernel
        # (default 15 min: labkit/runtime/local/userzygote.py); the test wants nothing left
        if os.environ.get("PYTHONPATH"):               # a development checkout's extra packages
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        (self.folder / "jupyterhub_config.py").write_text(CONFIG.format(
            port=self.port, hub_port=hub_port, api_port=api_port, state=self.folder,
            chp=proxy_command(), users=set(cpus), cpus=cpus, cmd=[str(start)], environment=env))
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.folder / "hub.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py"],
                                     cwd=self.folder, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_up(self, timeout: float = 150.0) -> None:
        import requests
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"JupyterHub exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if requests.get(self.url + "/hub/api", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise AssertionError(f"JupyterHub did not answer on {self.url} within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        self.log.flush()
        return (self.folder / "hub.log").read_bytes()[-n:].decode(errors="replace")

    def stop(self) -> list:
        """SIGTERM: the hub stops the servers it spawned and its proxy; SIGKILL after 30 s.
        Returns the proxy processes the hub left behind (ended here: a hub stopped while it was
        still starting leaves its proxy running)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
        left = [p for p in processes_of({0})
                if "configurable-http-proxy" in p[2] and f"--port {self.port} " in p[2] + " "]
        for pid, _, _ in left:
            os.kill(pid, signal.SIGTERM)
        return left


def pss_mib(pids) -> float:
    """Proportional set size of these processes together (shared pages split among sharers)."""
    total = 0
    for pid in pids:
        try:
            for line in pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total / 1024


def processes_of(uids: set[int]) -> list[tuple[int, int, str]]:
    """(pid, uid, command line) of every live process owned by one of uids."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            if uid in uids:
                cmd = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                found.append((int(entry), uid, cmd.decode(errors="replace").strip()))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


class Learner:
    """One learner's browser: the login cookie, a token from the hub, their server's kernels."""

    def __init__(self, hub: Hub, name: str):
        import requests
        self.hub, self.name = hub, name
        self.http = requests.Session()
        self.token = None

    def login(self, password: str) -> bool:
        """The login form, as a browser posts it; True when the hub set its login cookie."""
        self.http.get(self.hub.url + "/hub/login", timeout=30)
        r = self.http.post(self.hub.url + "/hub/login?next=", timeout=60, allow_redirects=False,
                           data={"username": self.name, "password": password,
                                 "_xsrf": self.http.cookies.get("_xsrf", "")})
        return r.status_code == 302 and "jupyterhub-hub-login" in self.http.cookies

    def make_token(self) -> None:
        """A token of this user's own (what the hub's token page makes), from the login cookie."""
        r = self.http.post(f"{self.hub.url}/hub/api/users/{self.name}/tokens", timeout=30,
                           headers={"X-XSRFToken": self.http.cookies.get("_xsrf", "")},
                           json={"note": "labkit hub test", "expires_in": 900})
        assert r.status_code == 201, f"{self.name}: token refused: {r.status_code} {r.text[:300]}"
        self.token = r.json()["token"]

    def api(self, method: str, path: str, **kw):
        import requests
        return requests.request(method, self.hub.url + path, timeout=60,
                                headers={"Authorization": f"token {self.token}"}, **kw)

    def start_server(self) -> None:
        r = self.api("POST", f"/hub/api/users/{self.name}/server")
        assert r.status_code in (201, 202), f"{self.name}: server not started: {r.status_code} {r.text[:300]}"

    def wait_server(self, timeout: float = 120.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            server = self.api("GET", f"/hub/api/users/{self.name}").json().get("servers", {}).get("")
            if server and server.get("ready"):
                return time.monotonic() - t0
            time.sleep(0.5)
        raise AssertionError(f"{self.name}'s server not ready after {timeout:.0f} s:\n{self.hub.tail()}")

    def server(self, method: str, path: str, **kw):
        return self.api(method, f"/user/{self.name}/api/{path}", **kw)

    def start_kernel(self, name: str = "labkit") -> "Kernel":
        r = self.server("POST", "kernels", json={"name": name})
        assert r.status_code == 201, f"{self.name}: kernel {name} not started: {r.status_code} {r.text[:300]}"
        return Kernel(self, r.json()["id"])


class Kernel:
    """A kernel of a learner's server, over its websocket (Jupyter's messaging protocol)."""

    def __init__(self, learner: Learner, kernel_id: str):
        import websocket
        self.learner, self.id = learner, kernel_id
        url = learner.hub.url.replace("http", "ws") + f"/user/{learner.name}/api/kernels/{kernel_id}/channels"
        self.ws = websocket.create_connection(url, timeout=30,
                                              header=[f"Authorization: token {learner.token}"])
        self.session = uuid.uuid4().hex

    def execute(self, code: str, timeout: float = 120.0) -> tuple[str, str | None]:
        """Run code; (everything it showed as text, the error's name and value or None)."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": self.session,
                       "username": self.learner.name, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        text, error, deadline = [], None, time.monotonic() + timeout
        while True:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(self.ws.recv())
            except Exception as e:                     # websocket timeout: say where it stopped
                raise AssertionError(f"{self.learner.name}: no answer within {timeout:.0f} s to "
                                     f"{code[:80]!r} ({type(e).__name__}); so far:\n{''.join(text)}\n"
                                     f"the hub's log (the learners' servers write there too):\n"
                                     f"{self.learner.hub.tail(6000)}")
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind in ("display_data", "update_display_data", "execute_result"):
                text.append(content["data"].get("text/plain", "") + "\n")
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(text), error

    def shutdown(self) -> None:
        try:
            self.ws.close()
        finally:
            self.learner.server("DELETE", f"kernels/{self.id}")


def code_cells_until(notebook: dict, marker: str) -> list[str]:
    """The notebook's code cells from the top down to the first that contains marker."""
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cells.append(source)
            if marker in source:
                return cells
    raise AssertionError(f"no code cell contains {marker!r}")


def dedent(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"
