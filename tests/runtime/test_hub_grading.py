"""A graded class on one JupyterHub, end to end, with real accounts and nbgrader's real exchange.

The hub of tests/runtime/test_hub.py (PAM logins, the local-process spawner, each server as its user)
with three accounts: an instructor and two learners, each home 0700 as docs/teaching.md says.
nbgrader's exchange is a folder made as nbgrader documents (`chmod ugo+rw`), named with the
course in an nbgrader_config.py on every account's JUPYTER_CONFIG_PATH. Every step runs as
its user, with the commands of docs/teaching.md:

- the instructor (a process of that account, as a terminal would run it): `python -m
  labkit.grading init`, `nbgrader generate_assignment` and `release_assignment`;
- learner 1 through their own server, as JupyterLab's Assignments tab does (nbgrader's
  server extension: fetch, the notebook saved through the contents API, submit), with a right
  answer; learner 2 in a kernel of their server (what a terminal there runs: `nbgrader
  fetch_assignment`, `submit`), with a wrong answer from the checker's corpus;
- the instructor: `nbgrader collect`, `autograde`, `generate_feedback`, `release_feedback`,
  `export`; the gradebook must hold 5 of 5 for the right answer and less for the wrong one;
- each learner fetches their feedback (one through the server, one with the command) and it
  holds their own checker line.

Then each learner's kernel tries to read the other's work: the exchange's folders (inbound,
feedback), the other's notebook, feedback and nbgrader cache in their home, the instructor's
course folder (submissions, feedback, gradebook); every attempt must be refused. A learner's
token does not open the instructor's formgrader. Last, chromium logs in to the hub as the
instructor and opens the formgrader's gradebook page, which shows both learners' scores.

Runs as root (CI); elsewhere, or without the hub, nbgrader or chromium, it is skipped in one line.
"""
import csv
import inspect
import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from support import hub_setup
from support import sysusers
from support.hub_accounts import one_hub  # noqa: F401 (the fixture)
from support.hub_accounts import PEEK, Account, end_all, fresh_home, install_kernel, instructor_python
from support.hub_setup import Hub, Learner, dedent

pytestmark = [pytest.mark.hub, pytest.mark.cluster, pytest.mark.timeout(900)]

TEACHER, RIGHT, WRONG = "lktteach", "lktgrade1", "lktgrade2"
USERS = (TEACHER, RIGHT, WRONG)
COURSE, A = "labkit", "00_cluster"
ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_EXTENSIONS = {"ServerApp": {"jpserver_extensions": {
    f"nbgrader.server_extensions.{x}": True
    for x in ("formgrader", "validate_assignment", "assignment_list", "course_list")}}}


def corpus_answer(name: str) -> str:
    """The exercise cell with an answer of the checker's corpus (tests/check_corpus/mean.py)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("corpus_mean", ROOT / "tests" / "check_corpus" / "mean.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    src = inspect.getsource(getattr(mod, name))
    return src.replace(f"def {name}(", "def mean_over_ranks(", 1)


def answer_cell(nb: dict) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("solution"))


def write_answer(learner: Learner, path: str, source: str) -> None:
    """The learner's edit, saved as JupyterLab saves it (the contents API)."""
    r = learner.server("GET", f"contents/{path}?content=1")
    assert r.status_code == 200, f"{learner.name}: {path}: {r.status_code}"
    nb = r.json()["content"]
    nb["cells"][answer_cell(nb)]["source"] = source
    r = learner.server("PUT", f"contents/{path}", json={"type": "notebook", "format": "json", "content": nb})
    assert r.status_code in (200, 201), f"{learner.name}: saving {path}: {r.status_code} {r.text[:300]}"


def assignments_api(learner: Learner, action: str) -> list:
    """Fetch, submit or fetch_feedback as the Assignments tab does; the assignments it lists."""
    r = learner.api("POST", f"/user/{learner.name}/assignments/{action}",
                    data={"course_id": COURSE, "assignment_id": A})
    assert r.status_code == 200, f"{learner.name}: {action}: {r.status_code} {r.text[:500]}"
    listed = r.json()
    assert isinstance(listed, dict) and listed.get("success"), f"{learner.name}: {action}: {listed}"
    return listed["value"]


def in_kernel(kernel, *cmd) -> str:
    """A command in the learner's kernel, in their home (their terminal)."""
    text, error = kernel.execute(dedent(f"""
        import os, subprocess
        r = subprocess.run({list(cmd)!r}, cwd=os.path.expanduser("~"), capture_output=True, text=True)
        print("RC", r.returncode)
        print(r.stdout[-2000:], r.stderr[-2000:])
    """), timeout=180)
    assert error is None and "RC 0" in text, f"{' '.join(cmd)} in {kernel.learner.name}'s kernel: {error}\n{text}"
    return text


def feedback_file(home: pathlib.Path) -> pathlib.Path:
    found = sorted((home / A / "feedback").glob(f"*/{A}.html"))
    assert len(found) == 1, f"feedback in {home}: {found}"
    return found[0]


def grades(course: pathlib.Path) -> dict:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course}/gradebook.db") as gb:
        return {s.id: (gb.find_submission(A, s.id).score, gb.find_submission(A, s.id).max_score)
                for s in gb.students}


def formgrader_page(hub: Hub, password: str) -> str:
    """The formgrader's gradebook of the assignment, in chromium after the hub's login form."""
    from support import browser_helpers
    with browser_helpers.chromium() as page:
        page.goto(hub.url + "/hub/login")
        page.fill("#username_input", TEACHER)
        page.fill("#password_input", password)
        page.click("#login_submit")
        page.wait_for_url(lambda url: "/hub/login" not in url)
        page.goto(f"{hub.url}/user/{TEACHER}/formgrader/gradebook/{A}/{A}")
        shot = str(browser_helpers.shot_path("formgrader-gradebook.png"))
        try:
            page.wait_for_selector("td.score:has-text('/')")
            page.click("#toggle_names")
            page.wait_for_selector(f"text={RIGHT}")
        except Exception as e:
            page.screenshot(path=shot, full_page=True)
            raise AssertionError(f"the formgrader's page at {page.url} ({type(e).__name__}; {shot}):\n"
                                 f"{page.inner_text('body')[:3000]}\nthe hub's log:\n{hub.tail()}") from None
        page.screenshot(path=shot, full_page=True)
        return page.inner_text("table")


def test_release_submit_autograde_feedback_on_the_hub(one_hub):
    sysusers.skip_unless_root()
    why = hub_setup.missing()
    if why:
        pytest.skip(why)
    pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[grading]'")
    from support import browser_helpers
    if browser_helpers.missing():
        pytest.skip(browser_helpers.missing())
    python = sysusers.python_for_others()
    uids = {sysusers.ensure_user(u)[0]: u for u in USERS}
    stale = end_all(set(uids), timeout=0)
    assert not stale, f"processes of an earlier run were left (now killed): {stale}"
    homes = {u: fresh_home(u) for u in USERS}
    passwords = {u: secrets.token_urlsafe(16) for u in USERS}
    for u in USERS:
        hub_setup.set_password(u, passwords[u])
    folder = pathlib.Path(tempfile.mkdtemp(prefix="labkit-grading-hub-"))
    os.chmod(folder, 0o711)
    # nbgrader's exchange, as nbgrader documents it, and its configuration for every account
    exchange = folder / "exchange"
    exchange.mkdir()
    subprocess.run(["chmod", "ugo+rw", str(exchange)], check=True)
    config = folder / "jupyter-config"
    (config / "jupyter_server_config.d").mkdir(parents=True)
    (config / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = {COURSE!r}\nc.Exchange.root = {str(exchange)!r}\n")
    (config / "jupyter_server_config.d" / "nbgrader.json").write_text(json.dumps(SERVER_EXTENSIONS))
    subprocess.run(["chmod", "-R", "a+rX", str(config)], check=True)
    kernels = install_kernel(python)
    bin_dir = str(pathlib.Path(python).parent)
    # the project's jupyter data (nbconvert's templates, for the feedback) where the Python of
    # the accounts is another venv than the project's (tests/support/sysusers.py)
    data = f"{kernels}:{pathlib.Path(sys.prefix) / 'share' / 'jupyter'}"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JUPYTER_CONFIG_PATH": str(config),
           "JUPYTER_PATH": data, "LANG": "C.UTF-8"}
    teaching_python, extra = instructor_python(python)
    teacher_env = {**env, **extra, "PATH": f"{pathlib.Path(teaching_python).parent}:/usr/bin:/bin",
                   "LABKIT_ZYGOTE_IDLE": "5"}      # the grading kernels' zygote: nothing left after
    cores = sorted(os.sched_getaffinity(0))
    hub = Hub(folder, {u: str(cores[i % len(cores)]) for i, u in enumerate(USERS)}, python, kernels,
              environment={"PATH": env["PATH"], "JUPYTER_CONFIG_PATH": str(config), "JUPYTER_PATH": data})
    teacher = Account(TEACHER, teacher_env)
    course = homes[TEACHER] / "labkit-course"
    t0 = time.monotonic()
    steps = {}

    def step(name):
        steps[name] = round(time.monotonic() - t0)
    try:
        hub.wait_up()
        people = {u: Learner(hub, u) for u in USERS}
        for u, person in people.items():
            assert person.login(passwords[u]), f"{u} could not log in:\n{hub.tail()}"
            person.make_token()
            if u != TEACHER:
                person.start_server()
        # the instructor: the course, then its release (docs/teaching.md)
        teacher.run(teaching_python, "-m", "labkit.grading", "init", str(course), "--lang", "en")
        teacher.run("sh", "-c", f"mkdir -p ~/.jupyter && printf 'c = get_config()\\nc.CourseDirectory.root"
                                f" = \"{course}\"\\n' > ~/.jupyter/nbgrader_config.py")
        teacher.run("nbgrader", "generate_assignment", A, cwd=course)
        teacher.run("nbgrader", "release_assignment", A, cwd=course)
        people[TEACHER].start_server()          # after ~/.jupyter/nbgrader_config.py: the formgrader's course
        step("released")
        for person in people.values():
            person.wait_server()
        right, wrong = people[RIGHT], people[WRONG]
        # learner 1: the Assignments tab's route
        listed = assignments_api(right, "fetch")
        assert any(x["assignment_id"] == A and x["status"] == "fetched" for x in listed), listed
        write_answer(right, f"{A}/{A}.ipynb", corpus_answer("right_clone"))
        assignments_api(right, "submit")
        # learner 2: a terminal's route, in a kernel of their server
        terminal = wrong.start_kernel()
        in_kernel(terminal, "nbgrader", "fetch_assignment", A)
        write_answer(wrong, f"{A}/{A}.ipynb", corpus_answer("sum_only"))
        in_kernel(terminal, "nbgrader", "submit", A)
        terminal.shutdown()                 # an idle websocket is not kept through the grading
        step("submitted")
        # the instructor grades and returns the feedback
        teacher.run("nbgrader", "collect", A, cwd=course)
        teacher.run("nbgrader", "autograde", A, cwd=course, timeout=600)
        step("autograded")
        teacher.run("nbgrader", "generate_feedback", A, cwd=course)
        teacher.run("nbgrader", "release_feedback", A, cwd=course)
        teacher.run("nbgrader", "export", cwd=course)
        got = grades(course)
        assert got[RIGHT] == (5.0, 5.0), got
        assert got[WRONG][0] < 5.0 and got[WRONG][1] == 5.0, got
        with open(course / "grades.csv") as f:
            exported = {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(f)}
        assert exported == {RIGHT: 5.0, WRONG: got[WRONG][0]}, exported
        # feedback, fetched by each learner: their own checker line
        assignments_api(right, "fetch_feedback")
        kernels_of = {u: people[u].start_kernel() for u in (RIGHT, WRONG)}
        in_kernel(kernels_of[WRONG], "nbgrader", "fetch_feedback", A)
        step("feedback")
        mine = {u: feedback_file(homes[u]).read_text() for u in (RIGHT, WRONG)}
        assert "mean_over_ranks: pass" in mine[RIGHT] and "FAIL" not in mine[RIGHT]
        assert "mean_over_ranks: FAIL" in mine[WRONG] and "mean_over_ranks: pass" not in mine[WRONG]
        # neither learner can read the other's work
        course_dir = exchange / COURSE
        for attacker, victim in ((WRONG, RIGHT), (RIGHT, WRONG)):
            home = homes[victim]
            cache = next(home.glob(f".local/share/jupyter/nbgrader_cache/{COURSE}/{victim}+{A}+*"))
            targets = {
                "list the exchange's submissions": str(course_dir / "inbound"),
                "list the exchange's feedback": str(course_dir / "feedback"),
                "read their notebook": str(home / A / f"{A}.ipynb"),
                "read their feedback": str(feedback_file(home)),
                "read their submission's secret": str(cache / "submission_secret.txt"),
                "list their home": str(home),
                "read the collected submission": str(course / "submitted" / victim / A / f"{A}.ipynb"),
                "read the graded notebook": str(course / "autograded" / victim / A / f"{A}.ipynb"),
                "read the instructor's feedback copy": str(course / "feedback" / victim / A / f"{A}.html"),
                "read the gradebook": str(course / "gradebook.db"),
            }
            for path in targets.values():
                assert os.path.exists(path), path
            text, error = kernels_of[attacker].execute(f"targets = {targets!r}\n" + PEEK)
            assert error is None, f"{attacker}'s attempts raised {error}:\n{text}"
            results = json.loads(next(ln for ln in text.splitlines() if ln.startswith("PEEK "))[5:])
            print(f"{attacker} against {victim}'s work: {results}")
            assert all(v.startswith("refused") for v in results.values()), \
                f"{attacker} read {victim}'s work: {results}"
        r = right.api("GET", f"/user/{TEACHER}/formgrader/gradebook")
        assert r.status_code == 403, f"{RIGHT} reached the formgrader: {r.status_code}"
        # the formgrader, in chromium
        table = formgrader_page(hub, passwords[TEACHER])
        cells = [[c.strip() for c in ln.split("\t")] for ln in table.splitlines()]
        rows = {c[1]: c[2] for c in cells if len(c) > 2 and c[1] in (RIGHT, WRONG)}   # name, overall score
        assert rows == {RIGHT: "5 / 5", WRONG: f"{got[WRONG][0]:g} / 5"}, table
        step("formgrader")
        print(f"seconds from the hub's start: {steps}")
        for u, k in kernels_of.items():
            k.shutdown()
        for u, person in people.items():
            r = person.api("DELETE", f"/hub/api/users/{u}/server")
            assert r.status_code in (202, 204), f"{u}'s server did not stop: {r.status_code}"
    finally:
        hub.stop()
        end_all(set(uids), timeout=10)
        for u in USERS:
            hub_setup.lock_password(u)
        shutil.rmtree(folder, ignore_errors=True)
