"""Packages renamed in this release stay importable under their old names for one release, with a
DeprecationWarning that names the new place (labkit._lazy.moved): notebooks outside the repository
may still import them."""
import subprocess
import sys

import pytest

OLD_AND_NEW = [
    # (statement with the old name, expression that must be True, the new package named)
    ("from labkit.doctor import pitfalls", "pitfalls is importlib.import_module('labkit.pitfalls.detectors')",
     "labkit.pitfalls"),
    ("import labkit.doctor.ranks as m", "m is importlib.import_module('labkit.pitfalls.ranks')", "labkit.pitfalls"),
    ("from labkit.doctor.checklist import convergence_checklist as f",
     "f is importlib.import_module('labkit.pitfalls.checklist').convergence_checklist", "labkit.pitfalls"),
    ("from labkit.diagnose import diagnose as f", "f is importlib.import_module('labkit.throughput').diagnose",
     "labkit.throughput"),
    ("from labkit.diagnose import timed_run as f", "f is importlib.import_module('labkit.throughput.steps').timed_run",
     "labkit.throughput"),
    ("import labkit.diagnose.draw as m", "m is importlib.import_module('labkit.throughput.plots')", "labkit.throughput"),
    ("from labkit.models import TinyGPT as f", "f is importlib.import_module('labkit.toy_models').TinyGPT",
     "labkit.toy_models"),
    ("import labkit.models as m", "m is importlib.import_module('labkit.toy_models')", "labkit.toy_models"),
    ("from labkit.parallel_dims import Layout as f", "f is importlib.import_module('labkit.nd').Layout",
     "labkit.nd.layout"),
    ("from labkit.clipping import global_grad_norm, clip_parity, norms_figure as f",
     "(global_grad_norm, clip_parity, f) == tuple(getattr(importlib.import_module('labkit.nd.' + m), n) for m, n in "
     "(('clipping', 'global_grad_norm'), ('parity', 'clip_parity'), ('plots', 'norms_figure')))", "labkit.nd"),
    ("from labkit.diagnose.verdict import Phases as f",
     "f is importlib.import_module('labkit.throughput.verdict').Phases", "labkit.throughput"),
]


# Each case runs in a process of its own that has imported torch and nothing of labkit: one
# Python imports torch (about 1.5 CPU-s) and forks once per case, in place of a fresh Python per
# case (16 of them: 24 CPU-s for this file, 4 with the forks). A case's module state is that of
# `python -W always::DeprecationWarning -c CODE` after `import torch`.
_FORKS = r"""
import json, os, sys, traceback, warnings
import torch                                          # noqa: F401 (what every case shares)
out = []
for code in json.loads(sys.stdin.read()):
    path = f"{sys.argv[1]}.{len(out)}"
    pid = os.fork()
    if pid == 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = sys.stderr = open(fd, "w", buffering=1, closefd=False)
        warnings.simplefilter("always", DeprecationWarning)
        rc = 0
        try:
            exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            rc = 1
        sys.stderr.flush()
        os._exit(rc)
    _, status = os.waitpid(pid, 0)
    with open(path) as f:
        out.append([os.waitstatus_to_exitcode(status), f.read()])
    os.unlink(path)
print(json.dumps(out))
"""
_results = {}


def _run_all(codes: list) -> None:
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([sys.executable, "-c", _FORKS, f"{tmp}/case"], input=json.dumps(codes),
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for code, (rc, err) in zip(codes, json.loads(p.stdout.splitlines()[-1])):
        _results[code] = subprocess.CompletedProcess([], rc, "", err)


def _run(code: str) -> subprocess.CompletedProcess:
    if code not in _results:
        _run_all(sorted(set(CASES) | {code}))
    return _results.pop(code)


def _case(old: str, same: str) -> str:
    return f"import importlib\n{old}\nassert {same}, 'not the same object'\n"


NEW_NAMES = ("import warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
             "from labkit import pitfalls, throughput\nimport labkit.pitfalls.ranks, labkit.throughput.plots\n"
             "pitfalls.lr_rule, throughput.diagnose\n")
COMMANDS = ("import warnings\nwarnings.simplefilter('error', DeprecationWarning)\nimport importlib\n"
            "import labkit.exercises as e\nassert e is importlib.import_module('labkit.course.exercises')\n"
            "from labkit.slides import style\n")
NO_NAME = "import labkit.doctor\nlabkit.doctor.no_such_thing\n"
NO_MODULE = "import labkit.diagnose.no_such_module\n"
CASES = [_case(old, same) for old, same, _ in OLD_AND_NEW] + [NEW_NAMES, COMMANDS, NO_NAME, NO_MODULE]


@pytest.mark.parametrize("old, same, new", OLD_AND_NEW)
def test_old_name_imports_the_new_module_and_warns(old, same, new):
    p = _run(_case(old, same))
    assert p.returncode == 0, p.stderr
    assert "DeprecationWarning" in p.stderr and f"is now {new}" in p.stderr, p.stderr


def test_new_names_do_not_warn():
    p = _run(NEW_NAMES)
    assert p.returncode == 0, p.stderr


def test_the_course_commands_keep_their_names_without_a_warning():
    """`python -m labkit.exercises` and `python -m labkit.slides` are commands (scripts/lab,
    scripts/test, the hub, the README): they stay, and `labkit.exercises` imported is the module
    labkit.course.exercises itself."""
    p = _run(COMMANDS)
    assert p.returncode == 0, p.stderr
    for cmd in ("labkit.exercises", "labkit.slides"):
        p = subprocess.run([sys.executable, "-m", cmd, "build", "--help"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "usage: python -m " + cmd in p.stdout, p.stdout + p.stderr


def test_a_name_that_never_existed_is_an_attribute_error():
    p = _run(NO_NAME)
    assert "AttributeError" in p.stderr and "no_such_thing" in p.stderr, p.stderr
    p = _run(NO_MODULE)
    assert "ModuleNotFoundError" in p.stderr, p.stderr
