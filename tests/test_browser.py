"""`make test-browser` (optional): JupyterLab driven in a real browser (Playwright + Chromium).

* learner: labs 00 and 01 opened from a learner's folder (as `make lab` builds it, on a fresh
  clone) open with no kernel dialog, run all cells with no error output (the unfinished exercise
  says NOT YET, the explorer's sliders render), save, and leave `git status` clean;
* author: a notebook edited and saved in JupyterLab (served as `make author` serves it) writes
  its labs_src/*.py through jupytext's pairing.

Skipped unless KERNELLAB_BROWSER=1 (make test-browser sets it), and skipped with a message when
Playwright, Chromium or JupyterLab is missing. Playwright cannot download its browsers offline:
point it at a system Chromium (`apt-get install chromium`, or CHROMIUM=/path/to/chrome).
KERNELLAB_SCREENSHOT=docs/jupyterlab.png also saves a screenshot of lab 01 after Run All."""
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
CHROMIUM = os.environ.get("CHROMIUM") or next(
    (p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
if CHROMIUM is None:
    pytest.skip("browser test: no Chromium found (apt-get install chromium, or set CHROMIUM=...)",
                allow_module_level=True)

spec = importlib.util.spec_from_file_location("nbtool", ROOT / "scripts" / "notebooks.py")
nbtool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nbtool)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on a folder, as `make lab` / `make author` start it."""

    def __init__(self, root: Path, tmp: Path, pythonpath: Path = ROOT / "labs_src"):
        self.port = _port()
        settings = tmp / ".jsettings"            # a quiet, fully rendered JupyterLab for the test
        for plugin, value in {"@jupyterlab/notebook-extension/tracker": '{"windowingMode": "none"}',
                              "@jupyterlab/apputils-extension/notification": '{"fetchNews": "false"}'}.items():
            f = settings / (plugin + ".jupyterlab-settings")
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(value)
        env = {"JUPYTERLAB_SETTINGS_DIR": str(settings), **os.environ, "PYTHONPATH": str(pythonpath), "JUPYTER_CONFIG_DIR": str(tmp / ".jcfg"), "JUPYTER_RUNTIME_DIR": str(tmp / ".jrt"),
               "JUPYTERLAB_WORKSPACES_DIR": str(tmp / ".jws"), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root}", f"--ServerApp.port={self.port}",
             "--ServerApp.ip=127.0.0.1", "--ServerApp.open_browser=False", f"--IdentityProvider.token={TOKEN}",
             "--allow-root"], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{self.url('api/status')}", timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(self.proc.stderr.read().decode()[-3000:])
                time.sleep(0.5)
        raise RuntimeError("JupyterLab did not start in 60 s")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}?token={TOKEN}"

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _open(page, lab, path):
    page.goto(lab.url(f"lab/tree/{path}"))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                           ".jp-DebuggerBugButton, .jp-KernelStatus", timeout=90_000)
    time.sleep(2)
    dialogs = page.locator(".jp-Dialog")
    assert dialogs.count() == 0 or "Select Kernel" not in dialogs.first.inner_text(), \
        "JupyterLab asked to select a kernel: the notebook has no kernelspec"


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
    return [e.inner_text()[:500] for e in
            page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").all()]


def _save(page):
    page.keyboard.press("Control+s")
    time.sleep(3)


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
        _open(page, lab, "00_measuring.ipynb")
        _run_all(page)
        assert not _errors(page), _errors(page)
        assert page.get_by_text("NOT YET").count() >= 1, "the unfinished exercise should say NOT YET"
        _save(page)
        assert '"outputs": [\n' in (dest / "00_measuring.ipynb").read_text() or \
            '"output_type"' in (dest / "00_measuring.ipynb").read_text(), "the learner's copy was saved"
        _open(page, lab, "01_softmax.ipynb")
        _run_all(page)
        assert not _errors(page), _errors(page)
        assert page.locator(".widget-slider, .widget-selection-slider, .jupyter-widgets").count() > 0, \
            "the explorer's sliders did not render"
        _save(page)
        shot = os.environ.get("KERNELLAB_SCREENSHOT")
        if shot:
            page.locator(".jp-Cell", has_text="Progress: the whole ladder").first.evaluate(
                "e => e.scrollIntoView({block: 'start'})")
            time.sleep(1)
            page.screenshot(path=str(ROOT / shot))
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
