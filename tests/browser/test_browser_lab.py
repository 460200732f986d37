"""The lab as learners use it: JupyterLab in chromium, cells run through the UI.

One JupyterLab (free loopback port, random token) serves a copy of notebooks/ and slides/.
- 00_cluster: Run > Run All Cells; every rank's output in the cluster cell, the deliberate
  error as a readable RankError, the progress-bar widgets rendered and moved to the end; then
  a %%ranks cell that sleeps on every rank is stopped by the toolbar's interrupt button (every
  rank's process is gone) and the next cell runs on 4 fresh ranks.
- 01_memory: the explorer; dragging a slider redraws the figure (the PNG's bytes change).
- 07_pipeline: the live Gantt chart's picture changes at least twice while the run goes on.
- RISE (when jupyterlab_rise is installed): a deck shows as a reveal.js presentation.
- Chinese: notebook 00's Chinese learner copy in this JupyterLab and the Chinese deck 00 (built
  unexecuted) at 1280 x 720 show real Chinese glyphs, not missing-glyph boxes (browser_glyphs).
Screenshots go to build/browser/ (test artefacts).
"""
import importlib.util
import json
import os
import pathlib
import re
import shutil
import time
import urllib.request

import pytest

from support import browser_glyphs
from support.browser_helpers import ROOT, chromium, jupyterlab, shot_path
from labkit.runtime.ports import ephemeral_range

pytestmark = [pytest.mark.browser, pytest.mark.cluster]
SETTINGS = {   # every cell in the page (no virtual scrolling), no news pop-ups
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    shutil.copytree(ROOT / "slides", root / "slides")
    from labkit.course.exercises import build
    build(ROOT / "notebooks", root / "learner-zh", lang="zh", only=["00"], notes=[])
    from labkit.i18n import lab_fonts       # the fonts `bash scripts/lab --lang zh` gives JupyterLab
    with jupyterlab(root, {**SETTINGS, lab_fonts.SETTINGS_FILE: lab_fonts.settings()}) as (base, token, runtime), chromium() as page:
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.on("dialog", lambda d: d.accept())     # "leave the page with unsaved changes?": yes
        page.goto(f"{base}/lab?token={token}")
        page.wait_for_selector(".jp-LauncherCard, .jp-Launcher", timeout=90_000)
        yield page, base, token, runtime


@pytest.fixture
def page(lab):
    """The lab's page; every kernel is shut down after the test."""
    yield lab
    low, _ = ephemeral_range()
    for conn in pathlib.Path(lab[3]).glob("kernel-*.json"):     # (the server's config: browser_helpers)
        info = json.loads(conn.read_text())
        ports = [info[k] for k in ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")]
        assert max(ports) < low, f"{conn.name}: kernel ports {ports}, not below the ephemeral range ({low})"
    shut_down_kernels(lab[1], lab[2])


def open_notebook(page, base, path):
    page.goto(f"{base}/lab/tree/{path}?reset")      # ?reset: only this notebook open
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=90_000)
    idle = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status='idle']")
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:          # JupyterLab sometimes asks which kernel: the notebook's
        if dialog.count():
            dialog.locator(".jp-mod-accept").click()
        elif idle.count():
            page.wait_for_timeout(500)
            if not dialog.count():
                return
        page.wait_for_timeout(250)
    raise TimeoutError(f"{path}: the kernel did not start within 90 s")


def shut_down_kernels(base, token):
    """Stop every kernel (and so its ranks) through the server's REST API."""
    for k in json.load(urllib.request.urlopen(f"{base}/api/kernels?token={token}")):
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE"))


def menu(page, top, item):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).first.click()


def run_all(page, within_s=20):
    """Run > Run All Cells on the open notebook, and check that it started: the notebook is
    given focus first (on a cold JupyterLab the command applies to whichever panel has focus,
    and ran nothing in two CI runs: every prompt stayed [ ]), and if no cell has queued or run
    within `within_s` seconds the menu is used once more."""
    prompts = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt")
    started = "() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')].some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"
    for attempt in range(2):
        prompts.first.click()                       # the notebook has focus, not another panel
        menu(page, "Run", "Run All Cells")
        try:
            page.wait_for_function(started, timeout=within_s * 1000)
            return
        except Exception:
            print(f"Run All had started no cell after {within_s} s (attempt {attempt + 1})")
    raise AssertionError("Run > Run All Cells started no cell, twice")


def cell(page, text):
    """The code cell whose source contains `text`."""
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text=text)).first


def wait_ran(page, c, timeout=120):
    """Until cell `c` has run (an execution count in its prompt) and no cell is queued or
    running ([*])."""
    c.locator(".jp-InputPrompt").first.wait_for()
    try:
        _wait_ran(page, c, timeout)
    except Exception as exc:
        page.screenshot(path=str(shot_path("lab_timeout.png")))
        # where did it stop? the prompts, and any cell whose output shows an error
        state = page.evaluate("""() => [...document.querySelectorAll(
            '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')].map((c, i) => {
              const out = c.querySelector('.jp-OutputArea')?.innerText || '';
              return [i, c.querySelector('.jp-InputPrompt')?.textContent || '',
                      /Error|Traceback|FAIL/.test(out) ? out.slice(-600) : ''];
            })""")
        raise AssertionError(f"{exc}\ncells (index, prompt, error output):\n" +
                             "\n".join(f"{i} {p} {o}" for i, p, o in state)) from None


def _wait_ran(page, c, timeout):
    page.wait_for_function("""c => {
        const prompts = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputPrompt')];
        return /\\[\\d+\\]/.test(c.querySelector('.jp-InputPrompt').textContent)
            && !prompts.some(p => p.textContent.includes('*'));
    }""", arg=c.element_handle(), timeout=timeout * 1000, polling=250)


def last_code_cell(page):
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell").last


def output_text(c):
    return c.locator(".jp-OutputArea").inner_text()


def add_cell_at_end_and_run(page, source):
    """Select the last cell, insert a code cell below (command mode 'b'), type, Ctrl+Enter."""
    last = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").last
    last.locator(".jp-InputPrompt").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.insert_text(source)
    page.keyboard.press("Control+Enter")
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").last


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z")


def test_cluster_notebook_run_all_then_interrupt(page):
    page, base, *_ = page
    open_notebook(page, base, "notebooks/00_cluster.ipynb")
    t0 = time.monotonic()
    run_all(page)
    wait_ran(page, last_code_cell(page), 150)
    ran = time.monotonic() - t0
    page.screenshot(path=str(shot_path("lab_00_run_all.png")), full_page=True)
    hello = output_text(cell(page, "def hello(greeting)"))
    for r in range(4):
        assert f"[rank {r}] hello from rank {r} of 4" in hello, hello
    err = cell(page, "def shapes_differ")
    err.scroll_into_view_if_needed()
    err.screenshot(path=str(shot_path("lab_00_rank_error.png")))
    text = output_text(err)
    assert "RankError" in text and "1 of 4 ranks failed" in text and "rank 2: RuntimeError" in text, text
    assert "t = t.reshape(3, -1)" in text, "the rank's traceback should show the failing line"
    prog = cell(page, "labkit.show.progress")
    prog.scroll_into_view_if_needed()
    prog.screenshot(path=str(shot_path("lab_00_progress_widget.png")))
    bars = prog.locator(".widget-hprogress")
    assert bars.count() == 4, "the progress widget (4 bars) did not render"
    widths = [b.locator(".progress-bar").evaluate("e => e.style.width") for b in bars.all()]
    assert widths == ["100%"] * 4, f"the bars did not follow the ranks' events: {widths}"
    assert "mean_over_ranks: pass" in output_text(cell(page, "labkit.check.mean_over_ranks"))

    # the interrupt button (toolbar ■) stops a %%ranks cell on every rank (the notebook's last
    # cell closed its cluster: start one again)
    restart = add_cell_at_end_and_run(page, "cluster = labkit.Cluster(world_size=4)")
    wait_ran(page, restart, 90)
    sleeper = add_cell_at_end_and_run(page, '%%ranks\nimport os, time\nprint(f"pid {os.getpid()} sleeping", flush=True)\ntime.sleep(600)')
    page.wait_for_function("""() => { const c = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')].pop();
        return (c.querySelector('.jp-OutputArea')?.innerText.match(/sleeping/g) || []).length === 4; }""", timeout=60_000)
    pids = [int(p) for p in re.findall(r"pid (\d+) sleeping", output_text(sleeper))]
    assert len(pids) == 4 and all(map(alive, pids))
    t1 = time.monotonic()
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) [data-command='notebook:interrupt-kernel']").first.click()
    wait_ran(page, sleeper, 30)
    stopped_in = time.monotonic() - t1
    sleeper.screenshot(path=str(shot_path("lab_00_interrupted.png")))
    text = output_text(sleeper)
    assert "KeyboardInterrupt" in text and "the 4 ranks were stopped" in text, text
    deadline = time.monotonic() + 10
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(alive, pids)), f"ranks still running after the interrupt: {[p for p in pids if alive(p)]}"
    after = add_cell_at_end_and_run(page, 'cluster.run(hello, "after the interrupt")')
    wait_ran(page, after, 60)
    text = output_text(after)
    for r in range(4):
        assert f"[rank {r}] after the interrupt from rank {r} of 4" in text, text
    print(f"\nnotebook 00: Run All {ran:.0f} s in the lab, interrupt took {stopped_in:.1f} s")


def _png(locator) -> str:
    return locator.evaluate("e => e.src")


def test_memory_explorer_slider_redraws_the_figure(page):
    page, base, *_ = page
    open_notebook(page, base, "notebooks/01_memory.ipynb")
    ex = cell(page, "controls = M.explorer(")
    ex.locator(".jp-InputArea-editor").click()
    menu(page, "Run", "Run All Above Selected Cell")
    wait_ran(page, cell(page, "psi, n = 7.5e9, 64"), 90)
    ex.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Control+Enter")
    wait_ran(page, ex, 60)
    img = ex.locator(".jp-OutputArea img").last
    img.wait_for()
    before = _png(img)
    verdict = ex.locator(".widget-html").first.inner_text()
    ex.scroll_into_view_if_needed()
    ex.screenshot(path=str(shot_path("lab_01_explorer_before.png")))
    row = ex.locator(".widget-slider", has_text="world size")
    readout = row.locator(".widget-readout").first.inner_text()
    slider = row.locator(".noUi-handle").first
    slider.scroll_into_view_if_needed()
    box = slider.bounding_box()          # taken right before the drag: the layout may have moved
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] - 150, box["y"] + box["height"] / 2, steps=8)
    page.mouse.up()
    moved = time.monotonic() + 10
    while row.locator(".widget-readout").first.inner_text() == readout and time.monotonic() < moved:
        page.wait_for_timeout(200)
    assert row.locator(".widget-readout").first.inner_text() != readout, \
        "the drag did not move the world-size slider (its readout is unchanged)"
    # JupyterLab draws an updated display into a new <img> element: look up the cell's current
    # picture each time (a handle on the old element would never see its src change).
    page.wait_for_function("""([c, b]) => { const all = c.querySelectorAll('.jp-OutputArea img');
        return all.length > 0 && all[all.length - 1].src !== b; }""",
                           arg=[ex.element_handle(), before], timeout=60_000)
    last, deadline = None, time.monotonic() + 30
    while _png(img) != last and time.monotonic() < deadline:   # until the last redraw has landed
        last = _png(img)
        page.wait_for_timeout(1500)
    ex.screenshot(path=str(shot_path("lab_01_explorer_after.png")))
    assert _png(img) != before
    assert ex.locator(".widget-html").first.inner_text() != verdict, "the verdict did not follow the slider"


def test_pipeline_gantt_grows_while_the_run_goes_on(page):
    page, base, *_ = page
    open_notebook(page, base, "notebooks/07_pipeline.ipynb")
    live = cell(page, "with live_gantt(cluster, s):")
    live.locator(".jp-InputArea-editor").click()
    menu(page, "Run", "Run All Above Selected Cell")
    wait_ran(page, cell(page, "s = with_comms(one_f_one_b(2, 3))"), 120)
    live.locator(".jp-InputArea-editor").click()
    live.evaluate("""c => { window.__frames = []; const seen = new Set();
        const look = () => { const img = c.querySelector('.jp-OutputArea img');
            const p = c.querySelector('.jp-InputPrompt').textContent;
            if (img && !seen.has(img.src)) { seen.add(img.src); window.__frames.push({running: p.includes('*')}); } };
        window.__observer = new MutationObserver(look);
        window.__observer.observe(c, {subtree: true, childList: true, attributes: true, characterData: true}); }""")
    page.keyboard.press("Control+Enter")
    wait_ran(page, live, 60)
    frames = page.evaluate("() => { window.__observer.disconnect(); return window.__frames; }")
    live.scroll_into_view_if_needed()
    live.screenshot(path=str(shot_path("lab_07_live_gantt.png")))
    during = sum(f["running"] for f in frames)
    assert during >= 3, f"the live chart was drawn {during} times while the cell ran; it should change at least twice"
    assert "measured bubble" in output_text(live)


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab_rise") is None,
                    reason="jupyterlab_rise is not installed (pip install -e '.[lab]')")
def test_rise_shows_a_deck_as_slides(page):
    page, base, *_ = page
    deck = sorted((ROOT / "slides").glob("*.ipynb"))[0]
    page.goto(f"{base}/rise/slides/{deck.name}")
    page.wait_for_selector(".reveal .slides section", timeout=90_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(shot_path("rise_first_slide.png")))
    cells = json.loads(deck.read_text())["cells"]
    slides = sum(c["metadata"].get("slideshow", {}).get("slide_type") in ("slide", "subslide") for c in cells)
    shown = page.evaluate("() => [...document.querySelectorAll('.reveal .slides section')]"
                          ".filter(s => !s.querySelector('section')).length")
    assert shown == slides, f"RISE shows {shown} slides of {deck.name}, which has {slides}"


def test_chinese_notebook_and_slide_show_chinese_glyphs(page):
    page, base, *_ = page
    from support.deck_build import chinese
    page.goto(f"{base}/lab/tree/learner-zh/00_cluster.ipynb?reset")   # no cell is run: no kernel wait
    nb = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown"
    page.locator(f"{nb} p").first.wait_for(timeout=90_000)
    page.screenshot(path=str(shot_path("lab_zh_00_notebook.png")))
    # the first paragraph (the system's fonts) in the notebook; the slide's title (reveal's web
    # font for Latin letters, the system's CJK font for the rest)
    # (JupyterLab's page is lang="en": its font list names the Simplified Chinese fonts, set by
    # labkit/i18n/lab_fonts.py, or chromium would take Debian's first CJK font, Noto Sans CJK JP)
    found, said = browser_glyphs.problems(page, f"{nb} p", "notebook 00 (Chinese), first paragraph",
                                          shot_path("lab_zh_00_notebook_glyphs.png"))
    seen = [said]
    deck = chinese(ROOT / "slides" / "00_cluster.ipynb")       # built by test_i18n_deck.py
    slide = page.context.browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        slide.goto(deck.html.as_uri())
        slide.wait_for_function("() => window.Reveal && Reveal.isReady()")
        slide.screenshot(path=str(shot_path("lab_zh_00_slide1.png")))
        bad, said = browser_glyphs.problems(slide, "section.present h1", "deck 00 (Chinese), slide 1's title",
                                            shot_path("lab_zh_00_slide1_glyphs.png"))
        found += bad
        seen.append(said)
    finally:
        slide.close()
    print("\n" + "\n".join(seen))
    assert not found, "Chinese text shown without Chinese glyphs (screenshots in build/browser/):\n" + \
        "\n".join(found)
