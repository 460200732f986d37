"""The accounts of the tests that play a class on one JupyterHub (tests/runtime/test_hub.py,
tests/runtime/test_hub_grading.py), beside tests/support/sysusers.py (the accounts) and tests/support/hub_setup.py (the
hub): the `labkit` kernel every account can run, commands run as an account the way its
terminal would, a fresh home, the end of an account's processes, and a Python for the
instructor's nbgrader where the accounts' Python is older than the project's."""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support import sysusers
from support.hub_setup import ROOT, dedent, processes_of

KERNELS = ROOT / "build" / "hub" / "jupyter"


def install_kernel(python: str) -> str:
    """The instructor's step in docs/teaching.md: the `labkit` kernel (warm: each learner's
    kernels fork from a server of theirs), run by a Python every learner can execute, in a folder on every server's JUPYTER_PATH (returned). Under a lock:
    the hub tests may run at once on two workers."""
    import fcntl
    KERNELS.mkdir(parents=True, exist_ok=True)
    with open(KERNELS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([python, "-m", "ipykernel", "install", "--name", "labkit", "--display-name",
                        "Python (labkit)", "--prefix", str(KERNELS)], check=True, capture_output=True,
                       timeout=60)
        subprocess.run([python, "-m", "labkit.runtime.local.kernels", "install", "labkit", str(KERNELS)],
                       check=True, capture_output=True, timeout=60)     # (warm kernels: its 2nd line)
    for p in [KERNELS, *KERNELS.parents]:
        if p == ROOT.parent:
            break
        os.chmod(p, os.stat(p).st_mode | 0o055)
    return str(KERNELS / "share" / "jupyter")


def end_all(uids: set, timeout: float = 30.0) -> list:
    """What these users still run after `timeout` s (their processes then killed)."""
    deadline = time.monotonic() + timeout
    while processes_of(uids) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes_of(uids)
    for pid, _, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def instructor_python(python: str) -> tuple:
    """(a Python the instructor's account can run, with the project's packages; its extra
    environment). The accounts' Python (tests/support/sysusers.py) is a venv of the system's Python
    when the project's lives in root's home; where that is an older release than the project's
    (Debian's 3.11.2 beside pyenv's 3.11.7), a package built for the newer one may refuse it
    (soupsieve 4.1, which nbconvert's HTML export of the feedback uses, needs 3.11.5). Then the
    instructor gets the project's own interpreter: its files copied into build/, its standard
    library beside it, and the project's packages through a .pth file. Copied, not hard-linked:
    a hard link (and the chmod below, and removing the folder) changes the inode's ctime, so
    every standard-library file of the interpreter the project runs on would look changed on
    disk to every learner's zygote and warm-kernel server running on the machine, and they
    would stop taking notebooks (labkit.runtime.local.stamps): CI's notebooks and tests then
    paid cold starts again after each hub test."""
    import fcntl
    import sysconfig
    check = "import sys; print(sys.version_info[:3])"
    probe = lambda py, env=None: subprocess.run([py, "-c", check], capture_output=True, text=True,
                                                **sysusers.as_user("lktprobe", env)).stdout
    if probe(python) == str(sys.version_info[:3]) + "\n":
        return python, {}
    base, dest = pathlib.Path(sys.base_prefix), ROOT / "build" / "instructor-python"
    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / ".instructor-python.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shared = lambda: (dest / "lib" / tag / "os.py").stat().st_ino == (base / "lib" / tag / "os.py").stat().st_ino
        if not (dest / "ready").exists() or shared():       # shared: hard-linked by an older build
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(base / "lib" / tag, dest / "lib" / tag,
                            ignore=shutil.ignore_patterns("site-packages", "__pycache__", "test"))
            (dest / "bin").mkdir()
            shutil.copy2(pathlib.Path(sys.base_prefix) / "bin" / tag, dest / "bin" / tag)
            for lib in (base / "lib").glob(f"lib{tag}*.so*"):
                shutil.copy2(lib, dest / "lib" / lib.name)
            site = dest / "lib" / tag / "site-packages"
            site.mkdir()
            (site / "labkit-shared.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{ROOT}\n")
            sysusers.console_scripts(dest / "bin", dest / "bin" / tag)
            (dest / "ready").touch()
        assert not shared(), f"{dest}: its standard library shares inodes with {base}'s"
    subprocess.run(["chmod", "-R", "a+rX", str(dest)], check=True)
    for p in dest.parents:
        if p == ROOT.parent:
            break
        os.chmod(p, os.stat(p).st_mode | 0o055)
    env = {"LD_LIBRARY_PATH": str(dest / "lib")}       # its libpython (the binary's RUNPATH is in /root)
    py = str(dest / "bin" / tag)
    assert probe(py, {**os.environ, **env}) == str(sys.version_info[:3]) + "\n", \
        f"{py} does not run as another account"
    return py, env


def fresh_home(user: str) -> pathlib.Path:
    """The account with an empty home of mode 0700 (docs/teaching.md, step 3): nothing of an
    earlier run (a fetched assignment, nbgrader's cache) is left."""
    uid, gid, home = sysusers.ensure_user(user)
    home = pathlib.Path(home)
    for p in home.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    os.chmod(home, 0o700)
    return home


class Account:
    """Commands run as one account, as its terminal would: its PATH, HOME and nbgrader config."""

    def __init__(self, user: str, env: dict):
        self.user, self.env = user, env
        self.home = pathlib.Path(sysusers.ensure_user(user)[2])

    def run(self, *cmd, cwd=None, timeout=300) -> str:
        kw = sysusers.as_user(self.user, env=self.env)
        kw["cwd"] = str(cwd or self.home)
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
        assert r.returncode == 0, f"{self.user}: {' '.join(cmd)} -> {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout + r.stderr


# Run in an account's kernel with `targets` ({what: path}; a `list...` is listed, the rest read):
# one line PEEK {what: refused (...) | SUCCEEDED | error (...)}
PEEK = dedent("""
    import json, os
    results = {}
    for what, path in targets.items():
        try:
            if what.startswith("list"):
                os.listdir(path)
            else:
                with open(path, "rb") as f:
                    f.read(64)
            results[what] = "SUCCEEDED"
        except PermissionError as e:
            results[what] = f"refused ({e})"
        except OSError as e:
            results[what] = f"error ({type(e).__name__}: {e})"
    print("PEEK " + json.dumps(results))
""")


@pytest.fixture
def one_hub():
    """The hub tests one at a time (two pytest workers may reach both at once): tried, with
    tests/runtime/test_hub.py and tests/runtime/test_hub_grading.py started together a learner's PAM login failed
    once while the other test changed passwords (chpasswd and usermod rewrite /etc/shadow)."""
    import fcntl
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / ".hub-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
