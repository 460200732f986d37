"""Real system users for the tests that play a class on one machine (issue: shared machines).

CI runs as root, so a test can create local users and run processes as them. Two things are
needed for that and both are here:

- `ensure_user(name)`: the user exists (created with `useradd` once, with a home folder), and its
  (uid, gid, home) comes back. Names start with ``lkt`` so that nothing else on the machine is
  touched; they are left in place (creating one costs a few ms; a test run may reuse them).
- `python_for_others()`: a Python that any user can execute with torch and labkit importable.
  The project's `.venv/bin/python` usually points into root's 0700 home (pyenv), which other
  users cannot enter; then a small venv is made under `build/others-venv` from the system's
  Python of the same minor version, with a ``.pth`` file that adds the project's site-packages
  and the checkout (both readable by everyone where the checkout is, as in CI).
- `as_user(name)`: keyword arguments for `subprocess.Popen`/`run` that start the child as that
  user (uid, gid, no supplementary groups, HOME and USER set).

`skip_unless_root()` is the one line that deselects such a test where it cannot run.
"""
from __future__ import annotations

import functools
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def skip_unless_root():
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a second local user (CI runs as root)")


def ensure_user(name: str) -> tuple[int, int, str]:
    assert name.startswith("lkt"), "test users are named lkt...: nothing else is touched"
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True,
                       capture_output=True)
        pw = pwd.getpwnam(name)
    return pw.pw_uid, pw.pw_gid, pw.pw_dir


def as_user(name: str, env: dict | None = None) -> dict:
    """Popen keyword arguments that run the child as `name` (a real uid/gid change)."""
    uid, gid, home = ensure_user(name)
    e = dict(os.environ if env is None else env)
    e.update(HOME=home, USER=name, LOGNAME=name)
    e.pop("XDG_RUNTIME_DIR", None)
    return dict(user=uid, group=gid, extra_groups=[], env=e, cwd=home)


SCRIPTS = {"nbgrader": "nbgrader.apps.nbgraderapp:main", "alembic": "alembic.config:main",
           "jupyter": "jupyter_core.command:main"}


def console_scripts(bin_dir: pathlib.Path, python: pathlib.Path) -> None:
    """The console scripts pip would have written into this venv for the packages the .pth file
    makes importable (nbgrader runs `alembic` by name; the instructor types `nbgrader ...`)."""
    for name, target in SCRIPTS.items():
        module, func = target.split(":")
        (bin_dir / name).write_text(f"#!{python}\nimport sys\nfrom {module} import {func}\n"
                                    f"sys.exit({func}())\n")
        (bin_dir / name).chmod(0o755)


def _runs_as(name: str, python: str) -> bool:
    kw = as_user(name)
    try:
        r = subprocess.run([python, "-c", "import torch, labkit"], capture_output=True, timeout=120,
                           **{**kw, "env": {**kw["env"], "PYTHONPATH": str(ROOT)}})
    except PermissionError:                      # the interpreter's path is closed to them
        return False
    return r.returncode == 0


@functools.lru_cache(maxsize=None)
def python_for_others(probe_user: str = "lktprobe") -> str:
    """A python executable that every local user can run, with torch and labkit importable
    (PYTHONPATH is not needed: the checkout is on the path through a .pth file)."""
    mine = str(pathlib.Path(sys.executable))
    if _runs_as(probe_user, mine):
        return mine
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(minor, path="/usr/bin:/usr/local/bin")
    if system is None:
        pytest.skip(f"the project's Python is not reachable by other users and there is no "
                    f"system {minor} to build one from")
    import fcntl
    venv = ROOT / "build" / "others-venv"
    py = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".others-venv.lock", "w") as lock:     # two test workers at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "bin" / "labkit-ready").exists():
            subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
            site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip()
            pathlib.Path(site, "labkit-shared.pth").write_text(
                f"{sysconfig.get_paths()['purelib']}\n{ROOT}\n")
            console_scripts(venv / "bin", py)
            (venv / "bin" / "labkit-ready").touch()
    for p in [venv, *venv.parents]:                     # readable along the way
        if p == ROOT.parent:
            break
        os.chmod(p, os.stat(p).st_mode | 0o055)
    if not _runs_as(probe_user, str(py)):
        pytest.skip(f"{py} cannot import torch and labkit as another user (is the checkout "
                    f"{ROOT} readable by everyone?)")
    return str(py)
