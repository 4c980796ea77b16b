"""`make test-browser` (optional): JupyterLab driven in a real browser (Playwright + Chromium).

* learner: labs 00 and 01 opened from a learner's folder (as `make lab` builds it, on a fresh
  clone, served with `make lab`'s options: scripts/lab.py) open with no kernel dialog and no news
  pop-up, run all cells with no error output (the unfinished exercise says NOT YET, the explorer
  renders once: one set of controls, one table), save, and leave `git status` clean; then
  `make reset`'s old/ folder opens in the file browser with the old copy in it;
  labs 04, 08 and 07 run all cells with no error output too; `make reset LAB=07` with lab 07 open in
  a tab refuses in one line (nothing moved), and once the tab is closed resets, and stays reset;
* author: a notebook edited and saved in JupyterLab (served as `make author` serves it) writes
  its labs_src/*.py through jupytext's pairing.

Skipped unless KERNELLAB_BROWSER=1 (make test-browser sets it, after scripts/browser_setup.py has
installed Playwright and a Chromium into the venv), and skipped with a message when Playwright,
Chromium or JupyterLab is still missing (CHROMIUM=/path/to/chrome picks one).
KERNELLAB_SCREENSHOT=docs saves the walk-through: docs/jupyterlab.png (lab 01's progress chart,
the README's picture), docs/walkthrough-*.png and docs/lab-NN-results.png (labs 01, 04, 07, 08 after
Run All: a timing section); a value ending in .png saves only the first."""
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "kernellab-browser-test"

if os.environ.get("KERNELLAB_BROWSER") != "1":
    pytest.skip("browser test: run `make test-browser` (sets KERNELLAB_BROWSER=1)", allow_module_level=True)
pytest.importorskip("playwright", reason="browser test: `pip install playwright` (and a Chromium) to run it")
pytest.importorskip("jupyterlab", reason="browser test: JupyterLab is not installed (the lab extra)")

def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


nbtool = _load("notebooks")
labtool = _load("lab")                    # make lab's server options
setup = _load("browser_setup")            # where make test-browser put Chromium
CHROMIUM = setup.system_chromium()
if CHROMIUM is None and not setup.bundled_chromium():
    pytest.skip("browser test: no Chromium (make test-browser installs Playwright's; else apt-get install "
                "chromium, or set CHROMIUM=...)", allow_module_level=True)
SHOT = os.environ.get("KERNELLAB_SCREENSHOT", "")


def _shot(page, name):
    """Save a walk-through screenshot when KERNELLAB_SCREENSHOT asks for them."""
    if not SHOT:
        return
    if SHOT.endswith(".png"):
        if name == "jupyterlab":
            page.screenshot(path=str(ROOT / SHOT))
        return
    d = ROOT / SHOT
    d.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(d / f"{name}.png"))


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _options():
    """make lab's server options (scripts/lab.py), each given once: no browser opened by the server
    (as root lab.py already says so; a second `--ServerApp.open_browser` is an error)."""
    opts = labtool.server_options()
    if not any(o.startswith("--ServerApp.open_browser") for o in opts):
        opts.append("--ServerApp.open_browser=False")
    return opts


class Lab:
    """A JupyterLab server on a folder, as `make lab` / `make author` start it."""

    def __init__(self, root: Path, tmp: Path, pythonpath: Path = ROOT / "labs_src"):
        self.port = _port()
        # every cell rendered (no windowing), so the test can read all outputs; the news pop-up is
        # left to make lab's own options (scripts/lab.py), which the test checks
        settings = tmp / ".jsettings"
        for plugin, value in {"@jupyterlab/notebook-extension/tracker": '{"windowingMode": "none"}'}.items():
            f = settings / (plugin + ".jupyterlab-settings")
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(value)
        self.runtime = tmp / ".jrt"     # its jpserver-*.json: where `make reset` finds it (JUPYTER_RUNTIME_DIR)
        os.environ["JUPYTER_RUNTIME_DIR"] = str(self.runtime)
        env = {"JUPYTERLAB_SETTINGS_DIR": str(settings), **os.environ, "PYTHONPATH": str(pythonpath), "JUPYTER_CONFIG_DIR": str(tmp / ".jcfg"), "JUPYTER_RUNTIME_DIR": str(self.runtime),  # noqa: E501
               "JUPYTERLAB_WORKSPACES_DIR": str(tmp / ".jws"), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root}", f"--ServerApp.port={self.port}",
             *_options(), f"--IdentityProvider.token={TOKEN}"],
            env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{self.url('api/status')}", timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.proc.stderr.read().decode()[-3000:])  # noqa: B904
                time.sleep(0.5)
        raise RuntimeError("JupyterLab did not start in 60 s")

    def url(self, path, reset=False):
        """`reset`: start from an empty workspace (no tabs restored from the last page)."""
        return f"http://127.0.0.1:{self.port}/{path}?token={TOKEN}" + ("&reset" if reset else "")

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"]) if CHROMIUM else \
            p.chromium.launch(args=["--no-sandbox"])
        yield b
        b.close()


def _open(page, lab, path, reset=False):
    page.goto(lab.url(f"lab/tree/{path}", reset))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                           ".jp-DebuggerBugButton, .jp-KernelStatus", timeout=90_000)
    time.sleep(2)
    dialogs = page.locator(".jp-Dialog")
    assert dialogs.count() == 0 or "Select Kernel" not in dialogs.first.inner_text(), \
        "JupyterLab asked to select a kernel: the notebook has no kernelspec"
    assert page.get_by_text("notified about official Jupyter news").count() == 0, \
        "JupyterLab's news pop-up is on: make lab's options should switch it off"


def _run_all(page, timeout_s=600):
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    t0 = time.time()
    time.sleep(3)
    while time.time() - t0 < timeout_s:
        busy = page.locator(".jp-InputArea-prompt", has_text="[*]").count()
        if busy == 0:
            break
        time.sleep(1)
    else:
        pytest.fail(f"Run All did not finish in {timeout_s} s")
    time.sleep(1)


def _errors(page):
    """Error outputs on the page. JupyterLab renders an exception as stderr (mime type
    application/vnd.jupyter.stderr), so a traceback is what tells one from a warning."""
    sel = (".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error'], "
           ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    return [e.inner_text()[:800] for e in page.locator(sel).all()
            if "Traceback" in e.inner_text() or "Error" in e.inner_text().splitlines()[0]]


def _ran_clean(path: Path) -> list[str]:
    """What is wrong with a saved notebook after Run All: error outputs, code cells never run
    (Run All stops at an error or a dead kernel)."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    bad = [f"cell {i}: {o.get('ename')}: {o.get('evalue', '')[:200]}" for i, c in enumerate(code)
           for o in c.outputs if o.output_type == "error"]
    not_run = [i for i, c in enumerate(code) if c.execution_count is None]
    return bad + ([f"{len(not_run)} code cells never ran (from cell {not_run[0]})"] if not_run else [])


# where each lab's results screenshot (docs/lab-NN-results.png) scrolls to after Run All: a timing
# section's heading (lab 04: the cell of its fp32 table), its lean table (at most 40 rows) and its
# sentences (one device)
RESULTS_AT = {"01_softmax.ipynb": "Timing at the target shapes",
              "04_gemv.ipynb": "results.table(f32)",
              "07_attention.ipynb": "Time: the decode ladder against torch",
              "08_decoder.ipynb": "Tokens per second, eager and graph-replayed"}


def _results_shot(page, nb):
    """docs/lab-NN-results.png: the lab's results section after Run All."""
    if not SHOT or SHOT.endswith(".png"):
        return
    page.locator(".jp-Cell", has_text=RESULTS_AT[nb]).first.evaluate(
        "e => e.scrollIntoView({block: 'start'})")
    time.sleep(1)
    _shot(page, f"lab-{nb[:2]}-results")


def _save(page):
    page.keyboard.press("Control+s")
    time.sleep(3)


def _until_closed(nb: Path, timeout_s=30):
    """Wait until the server sees the notebook's tab gone (its kernel's browser connection closed)."""
    t0 = time.time()
    while nbtool.open_in_jupyterlab(nb) and time.time() - t0 < timeout_s:
        time.sleep(0.5)


def _status(repo):
    return subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout


def test_learner_runs_a_lab_and_touches_no_tracked_file(browser, tmp_path):
    """On a fresh clone (the committed state, as a new user gets it): make lab's my-labs/, Run All,
    save; afterwards `git status` of the clone is empty (my-labs/ and figures/*.png are ignored)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    assert _status(clone) == ""
    dest = clone / "my-labs"
    nbtool.learner(dest, root=clone)
    lab = Lab(dest, tmp_path, pythonpath=clone / "labs_src")
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # lab 01 first: the explorer, the exercise and the walk-through pictures
        _open(page, lab, "01_softmax.ipynb")
        _shot(page, "walkthrough-1-open")
        _run_all(page)
        assert not _errors(page), _errors(page)
        cell = page.locator(".jp-CodeCell", has_text="explore.softmax(").last
        assert cell.locator(".widget-hslider").count() == 1, \
            "the explorer's controls should render once (its row-length slider):\n" + cell.inner_html()[-4000:]
        assert cell.locator("table").count() == 1, \
            f"the explorer's table should render once, not {cell.locator('table').count()} times"
        cell.evaluate("e => e.scrollIntoView({block: 'start'})")
        time.sleep(1)
        _shot(page, "walkthrough-3-explorer")
        grade = page.locator(".jp-CodeCell", has_text="grade_exercise(EXERCISE").last
        assert "NOT YET" in grade.inner_text(), "the unfinished exercise should say NOT YET"
        grade.evaluate("e => e.scrollIntoView({block: 'start'})")
        time.sleep(1)
        _shot(page, "walkthrough-2-exercise")
        page.locator(".jp-Cell", has_text="Progress: the whole ladder").first.evaluate(
            "e => e.scrollIntoView({block: 'start'})")
        time.sleep(1)
        _shot(page, "jupyterlab")
        _results_shot(page, "01_softmax.ipynb")
        _save(page)
        assert not _ran_clean(dest / "01_softmax.ipynb"), _ran_clean(dest / "01_softmax.ipynb")
        page.close()
        # make reset LAB=01: the saved copy goes to old/, which the file browser lists and opens
        _until_closed(dest / "01_softmax.ipynb")
        moved = nbtool.reset("01", dest)
        assert moved is not None and moved.parent == dest / "old"
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(lab.url("lab/tree/old", reset=True))
        entry = page.locator(".jp-DirListing-item", has_text=moved.stem[:20])
        entry.first.wait_for(timeout=60_000)
        _shot(page, "walkthrough-4-old-folder")
        _open(page, lab, f"old/{moved.name}", reset=True)
        dialogs = page.locator(".jp-Dialog")
        assert dialogs.count() == 0, f"opening the old copy showed a dialog: {dialogs.first.inner_text()[:300]}"
        assert page.locator(".jp-OutputArea-output").count() > 0, "the old copy should keep its outputs"
        # lab 00, all of it
        _open(page, lab, "00_measuring.ipynb", reset=True)
        _run_all(page)
        assert not _errors(page), _errors(page)
        _save(page)
        assert not _ran_clean(dest / "00_measuring.ipynb"), _ran_clean(dest / "00_measuring.ipynb")
        assert "NOT YET" in page.locator(".jp-CodeCell", has_text="grade_exercise(EXERCISE").last.inner_text()
        # labs 04, 08 and 07, all of each; lab 07 stays open for `make reset` below
        for nb in ("04_gemv.ipynb", "08_decoder.ipynb", "07_attention.ipynb"):
            _open(page, lab, nb, reset=True)
            if nb != "04_gemv.ipynb":
                _shot(page, f"walkthrough-{nb[:2]}-open")
            _run_all(page, timeout_s=900)
            assert not _errors(page), (nb, _errors(page))
            _results_shot(page, nb)
            _save(page)
            assert not _ran_clean(dest / nb), (nb, _ran_clean(dest / nb))
        # make reset LAB=07 with lab 07 open in this tab: refused (the tab's next save would write the
        # old notebook back over the fresh copy), nothing moved; the command says so in one line
        mine = (dest / "07_attention.ipynb").read_bytes()
        with pytest.raises(nbtool.ResetRefused, match="open in JupyterLab.*Close its tab first.*FORCE=1"):
            nbtool.reset("07", dest, force=False)
        assert (dest / "07_attention.ipynb").read_bytes() == mine and not list((dest / "old").glob("07_*"))
        p = subprocess.run([sys.executable, str(ROOT / "scripts" / "notebooks.py"), "reset", "07", str(dest)],
                           capture_output=True, text=True, env={**os.environ, "JUPYTER_RUNTIME_DIR": str(lab.runtime),
                                                               "FORCE": ""})
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "Close its tab" in p.stderr, p
        # the learner closes the tab (the kernel may keep running): now the reset goes through, and
        # the tab, gone, cannot undo it
        page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="07_attention").locator(
            ".lm-TabBar-tabCloseIcon").first.click()
        time.sleep(1)
        dialogs = page.locator(".jp-Dialog")
        assert dialogs.count() == 0, f"closing the saved tab asked: {dialogs.first.inner_text()[:300]}"
        _until_closed(dest / "07_attention.ipynb")
        moved = nbtool.reset("07", dest, force=False)
        assert moved is not None and moved.read_bytes() == mine
        fresh = (dest / "07_attention.ipynb").read_bytes()
        assert fresh != mine and b'"output_type"' not in fresh
        time.sleep(5)                                     # no stray save lands on the fresh copy
        assert (dest / "07_attention.ipynb").read_bytes() == fresh
        page.close()
    finally:
        lab.close()
    assert _status(clone) == "", f"a learner's session changed the repository:\n{_status(clone)}"


def test_author_edit_reaches_labs_src(browser, tmp_path):
    root = tmp_path / "repo"
    for d in ("labs_src", "notebooks"):
        (root / d).mkdir(parents=True)
    shutil.copy(ROOT / "labs_src" / "03_add.py", root / "labs_src")
    shutil.copy(ROOT / "notebooks" / "03_add.ipynb", root / "notebooks")
    shutil.copy(ROOT / "jupytext.toml", root)
    lab = Lab(root, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        _open(page, lab, "notebooks/03_add.ipynb")
        cell = page.locator(".jp-Notebook .jp-Cell.jp-CodeCell").first
        cell.locator(".cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type("\n# an author's edit, typed in the browser")
        page.keyboard.press("Escape")
        _save(page)
        page.close()
    finally:
        lab.close()
    assert "an author's edit, typed in the browser" in (root / "labs_src" / "03_add.py").read_text()
