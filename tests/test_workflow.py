"""The learner's and the author's workflow: exercises that grade the learner, registering a
variant of one's own, learner copies / reset / student build, `make clean-notebooks`, jupytext
pairing through the Jupyter server, readable plots, the explorers without a widget front end."""
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import numpy as np
import pytest

import kernellab as kl
from kernellab import check, softmax
from kernellab.build import CompileError
from conftest import gpu

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("nbtool", ROOT / "scripts" / "notebooks.py")
nbtool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nbtool)

MAX_KERNEL = r"""
__device__ float warp_reduce_max(float v) {
    BODY
}
extern "C" __global__ void row_max32(const float* x, float* out, int rows) {
    int row = blockIdx.x, lane = threadIdx.x;
    if (row < rows) {
        float m = warp_reduce_max(x[row * 32 + lane]);
        if (lane == 0) out[row] = m;
    }
}
"""
STUB = MAX_KERNEL.replace("BODY", "// TODO\n    return v;")
DONE = MAX_KERNEL.replace("BODY", "for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
                                  "    return v;")
WRONG = MAX_KERNEL.replace("BODY", "for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
                                   "    return v;")
GRADE = dict(make_input=lambda: np.random.default_rng(1).standard_normal((37, 32)).astype(np.float32),
             reference=lambda x: x.max(axis=1), grid=lambda x: (x.shape[0],), block=(32,),
             scalars=lambda x: (x.shape[0],), ptx_must_contain="shfl.sync.bfly")


# ---- exercises ------------------------------------------------------------------------------------

def test_unfinished_stub_says_not_yet_and_does_not_raise(capsys):
    assert check.grade_exercise(STUB, "row_max32", **GRADE) is None
    assert "NOT YET" in capsys.readouterr().out


def test_unfinished_stub_raises_when_strict():
    with pytest.raises(check.CheckError, match="shfl.sync.bfly|TODO"):   # compile-only: the TODO says it
        check.grade_exercise(STUB, "row_max32", strict=True, **GRADE)


def test_compile_error_says_not_yet(capsys):
    assert check.grade_exercise(DONE.replace("fmaxf", "fmaxf("), "row_max32", **GRADE) is None
    assert "NOT YET" in capsys.readouterr().out
    with pytest.raises(CompileError):
        check.grade_exercise(DONE.replace("fmaxf", "fmaxf("), "row_max32", strict=True, **GRADE)


def test_wrong_kernel_name_says_not_yet(capsys):
    check.grade_exercise(DONE, "row_max", **GRADE)
    assert "NOT YET" in capsys.readouterr().out


def test_finished_kernel_passes_strict(capsys):
    res = check.grade_exercise(DONE, "row_max32", strict=True, **GRADE)
    out = capsys.readouterr().out
    assert "NOT YET" not in out and "shfl.sync.bfly" in out
    assert res is not None or "CHECKED ON THE CPU" in out or "NOT CHECKED (no GPU)" in out   # compile-only: said plainly


@gpu
def test_grade_checks_and_times_against_the_step(capsys):
    step = ("numpy-free cupy max", lambda x: x.max(axis=1))
    res = check.grade_exercise(DONE, "row_max32", strict=True, step=step, **GRADE)
    out = capsys.readouterr().out
    assert "your kernel" in out and "numpy-free cupy max" in out and "GPU time, L2 flushed" in out
    assert res["your_us"] > 0 and res["step_us"] > 0


@gpu
def test_wrong_answer_is_not_yet_on_a_gpu(capsys):
    assert check.grade_exercise(WRONG, "row_max32", **GRADE) is None
    assert "NOT YET" in capsys.readouterr().out
    with pytest.raises(check.CheckError):
        check.grade_exercise(WRONG, "row_max32", strict=True, **GRADE)


# ---- your own variant -----------------------------------------------------------------------------

MINE = r"""
extern "C" __global__ void softmax_test_mine(const float* x, float* y, int R, int C) {
    const int row = blockIdx.x;
    if (row >= R) return;
    const float* xr = x + (size_t)row * C;
    float m = -__int_as_float(0x7f800000), d = 0.0f;
    for (int i = 0; i < C; ++i) m = fmaxf(m, xr[i]);
    for (int i = 0; i < C; ++i) d += expf(xr[i] - m);
    for (int i = threadIdx.x; i < C; i += blockDim.x) y[(size_t)row * C + i] = expf(xr[i] - m) / d;
}
"""


@pytest.fixture
def registered():
    v = check.register(softmax, "99_test_mine", MINE, "softmax_test_mine", grid=lambda x: (x.shape[0],),
                       block=(32,), scalars=lambda x: x.shape)
    yield v
    check.unregister(softmax, "99_test_mine")
    assert "99_test_mine" not in softmax.SOFTMAX.variants


def test_register_adds_a_checked_variant(registered, capsys):
    assert list(softmax.SOFTMAX.variants)[-1] == "99_test_mine"
    check.variants(softmax, ["99_test_mine"])
    assert "99_test_mine" in capsys.readouterr().out
    # registering again replaces the learner's own version; a lab step cannot be replaced
    check.register(softmax, "99_test_mine", MINE, "softmax_test_mine", grid=lambda x: (x.shape[0],),
                   block=(32,), scalars=lambda x: x.shape)
    with pytest.raises(ValueError, match="already has a step"):
        check.register(softmax, "05_online_vec4", MINE, "softmax_test_mine", grid=lambda x: (1,), block=(32,))
    with pytest.raises(ValueError):
        check.unregister(softmax, "05_online_vec4")


def test_register_compile_error_raises():
    with pytest.raises(CompileError):
        check.register(softmax, "98_broken", MINE.replace("fmaxf", "fmaxf("), "softmax_test_mine",
                       grid=lambda x: (1,), block=(32,))
    assert "98_broken" not in softmax.SOFTMAX.variants


@gpu
def test_registered_variant_is_checked_and_timed(registered):
    from kernellab import bench
    check.variants(softmax, ["99_test_mine"])          # raises on a mismatch
    df = bench.compare(softmax, [((256, 1000), "float32")], names=["03_warp_per_row", "99_test_mine"],
                       baselines=False, reps=10)
    assert set(df["name"]) == {"03_warp_per_row", "99_test_mine"}


# ---- learner copies, reset, student build, solutions ------------------------------------------------

def _tags(nb):
    return [t for c in nb.cells for t in c.metadata.get("tags", [])]


def test_learner_copies_have_no_solutions_and_are_never_overwritten(tmp_path):
    dest = tmp_path / "my-labs"
    nbtool.learner(dest)
    nbs = sorted(dest.glob("[0-9][0-9]_*.ipynb"))
    assert [p.name for p in nbs] == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for p in nbs:
        nb = nbformat.read(p, as_version=4)
        assert "solution" not in _tags(nb) and "exercise" in _tags(nb), p.name
        assert not any("SOLUTION" in c.source for c in nb.cells), p.name
        assert nb.metadata["kernelspec"]["name"] == "python3"
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    for name in ("kernels", "figures", "docs"):
        if (ROOT / name).exists():
            assert (dest / name).resolve() == (ROOT / name).resolve()
    mine = nbs[1]
    mine.write_text(mine.read_text().replace("TODO", "MY WORK"))
    (dest / "00_measuring.ipynb").unlink()
    nbtool.learner(dest)                               # adds the missing lab, keeps the edited one
    assert "MY WORK" in mine.read_text() and (dest / "00_measuring.ipynb").exists()
    moved = nbtool.reset(mine.name[:2], dest)          # moves aside, restores a fresh copy
    # in a folder JupyterLab lists (not a dot-folder, which its file browser hides and will not open)
    assert moved.exists() and "MY WORK" in moved.read_text() and moved.parent == dest / "old"
    assert "MY WORK" not in mine.read_text()


def test_reset_says_where_the_old_copy_went(tmp_path, capsys):
    dest = tmp_path / "my-labs"
    nbtool.learner(dest, only="01")
    capsys.readouterr()
    moved = nbtool.reset("01", dest)
    out = capsys.readouterr().out
    assert str(moved) in out and "old/" in out and "nothing was deleted" in out


def test_make_student_refuses_to_overwrite_without_force(tmp_path):
    dest = tmp_path / "class"
    env = {**os.environ, "MAKEFLAGS": "", "KERNELLAB_NO_SETUP": "1"}
    run = lambda *a: subprocess.run(["make", "-s", "student", f"DEST={dest}", *a], cwd=ROOT, env=env,  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    p = run()
    if "KERNELLAB_NO_SETUP" in p.stderr:
        pytest.skip("make's python is not set up here (scripts/env.sh would install it)")
    assert p.returncode == 0, p.stderr
    target = sorted(dest.glob("*.ipynb"))[0]
    target.write_text(target.read_text().replace("TODO", "EDITED"))
    assert run().returncode == 0 and "EDITED" in target.read_text()
    assert run("FORCE=1").returncode == 0 and "EDITED" not in target.read_text()
    assert not (dest / "kernels").exists()             # a classroom set is notebooks only


def test_solutions_keep_the_solutions(tmp_path):
    nbtool.solutions(tmp_path)
    nb = nbformat.read(sorted(tmp_path.glob("01_*.ipynb"))[0], as_version=4)
    assert "solution" in _tags(nb)


# ---- authors: make clean-notebooks keeps edits, clears outputs ------------------------------------

def _repo_copy(tmp_path):
    for d in ("labs_src", "notebooks"):
        (tmp_path / d).mkdir()
    for p in sorted((ROOT / "labs_src").glob("0[01]_*.py")):
        shutil.copy(p, tmp_path / "labs_src" / p.name)
        shutil.copy(ROOT / "notebooks" / f"{p.stem}.ipynb", tmp_path / "notebooks")
    shutil.copy(ROOT / "jupytext.toml", tmp_path)
    return tmp_path


def test_clean_notebooks_keeps_the_edit_and_clears_outputs(tmp_path):
    root = _repo_copy(tmp_path)
    ipynb, py = root / "notebooks" / "01_softmax.ipynb", root / "labs_src" / "01_softmax.py"
    nb = nbformat.read(ipynb, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\nprint('an author edit')"
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x\n")]
    code.execution_count = 3
    time.sleep(0.01)
    nbformat.write(nb, ipynb)
    nbtool.build(root)
    assert "print('an author edit')" in py.read_text()          # the edit reached the source
    clean = json.loads(ipynb.read_text())
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in clean["cells"] if c["cell_type"] == "code")
    assert any("an author edit" in "".join(c["source"]) for c in clean["cells"])
    assert clean["metadata"]["kernelspec"]["name"] == "python3"
    # the other way round: an edited source regenerates its notebook
    time.sleep(0.01)
    py.write_text(py.read_text().replace("print('an author edit')", "print('edited in the .py')"))
    nbtool.build(root)
    assert "edited in the .py" in ipynb.read_text()


# What JupyterLab 4 and jupytext write into a notebook on save (seen in a browser session).
JUPYTERLAB_SAVE = {"language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                     "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                     "pygments_lexer": "ipython3", "version": "3.11.2"},
                   "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}},
                   "jupytext": {"cell_metadata_filter": "tags,-all", "notebook_metadata_filter": "-all"}}


def test_clean_notebooks_strips_editor_metadata_and_keeps_hidden_cells(tmp_path):
    root = _repo_copy(tmp_path)
    ipynb, py = root / "notebooks" / "01_softmax.ipynb", root / "labs_src" / "01_softmax.py"
    nb = nbformat.read(ipynb, as_version=4)
    nb.metadata.update(JUPYTERLAB_SAVE)
    codes = [c for c in nb.cells if c.cell_type == "code"]
    for c in nb.cells:
        c.metadata.update({"collapsed": False, "scrolled": True, "lines_to_next_cell": 2, "editable": True,
                           "execution": {"iopub.execute_input": "2026-11-23T10:00:00Z"}})
    was_hidden = sum(bool(c.metadata.get("jupyter", {}).get("source_hidden")) for c in nb.cells)
    codes = [c for c in codes if not c.metadata.get("jupyter", {}).get("source_hidden")]
    codes[1].metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": False}   # an author hides one
    time.sleep(0.01)
    nbformat.write(nb, ipynb)
    nbtool.build(root)
    clean = json.loads(ipynb.read_text())
    assert set(clean["metadata"]) <= {"kernelspec", "language_info"}
    assert clean["metadata"]["kernelspec"]["name"] == "python3"
    assert clean["metadata"].get("language_info", {"name": "python"}) == {"name": "python"}
    for c in clean["cells"]:
        assert set(c["metadata"]) <= {"tags", "jupyter"}, c["metadata"]
        assert c["metadata"].get("jupyter", {"source_hidden": True}) == {"source_hidden": True}
    hidden = [c for c in clean["cells"] if c["metadata"].get("jupyter")]
    assert len(hidden) == was_hidden + 1 and codes[1].source in ["".join(c["source"]) for c in hidden]
    assert 'jupyter={"source_hidden": true}' in py.read_text()      # the source keeps it
    assert nbtool.build(root) == []                                   # and a second build is a no-op


# ---- authors: saving in JupyterLab writes labs_src/ (jupytext pairing) ----------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_saving_a_notebook_through_the_server_writes_the_py(tmp_path):
    pytest.importorskip("jupyter_server", reason="jupyter_server is not installed (the lab extra)")
    pytest.importorskip("jupytext")
    root = _repo_copy(tmp_path)
    port, token = _free_port(), "kernellab-test"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / ".jcfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / ".jrt")}
    srv = _jupyter_server(root, env, port, token)
    url = f"http://127.0.0.1:{port}/api/contents/notebooks/01_softmax.ipynb"
    hdr = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    try:
        with _answered(srv, url, hdr) as r:
            model = json.load(r)
        nb = model["content"]
        first_md = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
        first_md["source"] = first_md["source"] + "\n\nSaved through the Jupyter server."
        body = json.dumps({"type": "notebook", "format": "json", "content": nb}).encode()
        req = urllib.request.Request(url, data=body, headers=hdr, method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status in (200, 201)
        py = (root / "labs_src" / "01_softmax.py").read_text()
        assert "Saved through the Jupyter server." in py, "jupytext pairing did not write labs_src/01_softmax.py"
        assert not py.startswith("# ---"), "the .py gained a metadata header"
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def _jupyter_server(root, env, port, token):
    """A jupyter_server on 127.0.0.1:port serving root, token auth, no browser (the tests' stand-in for JupyterLab)."""
    return subprocess.Popen([sys.executable, "-m", "jupyter_server", f"--ServerApp.root_dir={root}",
                             f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1", "--ServerApp.open_browser=False",
                             f"--IdentityProvider.token={token}", "--allow-root"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root)


def _answered(srv, url, hdr):
    """The first answer of the server to GET url (it may take a minute to start), or a test failure."""
    for _ in range(120):
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=hdr), timeout=5)
        except OSError:
            if srv.poll() is not None:
                pytest.fail("jupyter_server exited: " + srv.stderr.read().decode()[-2000:])
            time.sleep(0.5)
    pytest.fail("jupyter_server did not answer in 60 s")


def test_reset_refuses_while_the_notebook_is_open_in_jupyterlab(tmp_path, monkeypatch):
    """make reset LAB=01 with 01 open in a JupyterLab tab (a session on it, a browser connected to its
    kernel): one line, exit 1, nothing moved (the tab's next save would undo the reset). With the tab
    closed (no connection; the kernel may run on) it resets; FORCE=1 resets anyway. No browser: the
    tab is a websocket on the kernel, as JupyterLab's."""
    pytest.importorskip("jupyter_server", reason="jupyter_server is not installed (the lab extra)")
    import asyncio
    dest = tmp_path / "my-labs"
    nbtool.learner(dest, only="01", links=False)
    nb = dest / "01_softmax.ipynb"
    mine = nb.read_bytes()
    port, token = _free_port(), "kernellab-test"
    runtime = tmp_path / ".jrt"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))      # where make reset looks for servers
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / ".jcfg"), "JUPYTER_RUNTIME_DIR": str(runtime)}
    srv = _jupyter_server(dest, env, port, token)
    api = f"http://127.0.0.1:{port}/api"
    hdr = {"Authorization": f"token {token}", "Content-Type": "application/json"}

    def make_reset(**extra):
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "notebooks.py"), "reset", "01", str(dest)],
                              capture_output=True, text=True, env={**env, "FORCE": "", **extra}, timeout=120)

    try:
        _answered(srv, f"{api}/status", hdr).close()
        assert nbtool.open_in_jupyterlab(nb) is None                 # no session on it
        body = json.dumps({"path": "01_softmax.ipynb", "type": "notebook", "name": "",
                           "kernel": {"name": "python3"}}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{api}/sessions", data=body, headers=hdr, method="POST"),
                               timeout=60).close()
        assert nbtool.open_in_jupyterlab(nb) is None                 # a session, no tab connected
        refused = asyncio.run(_with_tab(api, port, token, hdr, make_reset))
        assert refused.returncode == 1, refused
        line = refused.stderr.strip()
        assert len(line.splitlines()) == 1 and "01_softmax.ipynb is open in JupyterLab" in line, line
        assert "Close its tab first" in line and "make reset LAB=01 FORCE=1" in line, line
        assert nb.read_bytes() == mine and not (dest / "old").exists()
        with pytest.raises(nbtool.ResetRefused):                      # the same, from Python
            asyncio.run(_with_tab(api, port, token, hdr, lambda: nbtool.reset("01", dest, force=False)))
        done = make_reset()                                           # the tab closed, the kernel still runs
        assert done.returncode == 0 and "moved" in done.stdout, done
        assert len(list((dest / "old").glob("01_softmax.*.ipynb"))) == 1
        forced = asyncio.run(_with_tab(api, port, token, hdr, lambda: make_reset(FORCE="1")))
        assert forced.returncode == 0 and "FORCE=1: resetting anyway" in forced.stdout, forced
        assert len(list((dest / "old").glob("01_softmax.*.ipynb"))) == 2
    finally:
        srv.terminate()
        srv.wait(timeout=30)


async def _with_tab(api, port, token, hdr, fn):
    """Run fn() while a browser-like websocket is connected to 01_softmax.ipynb's kernel."""
    import asyncio
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect
    with urllib.request.urlopen(urllib.request.Request(f"{api}/sessions", headers=hdr), timeout=10) as r:
        kid = next(s["kernel"]["id"] for s in json.load(r) if s["path"] == "01_softmax.ipynb")
    ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:{port}/api/kernels/{kid}/channels",
                                             headers={"Authorization": f"token {token}"}))
    try:
        for _ in range(40):
            with urllib.request.urlopen(urllib.request.Request(f"{api}/kernels/{kid}", headers=hdr), timeout=10) as r:
                if json.load(r).get("connections", 0) > 0:
                    break
            await asyncio.sleep(0.25)
        return fn()
    finally:
        ws.close()
        for _ in range(40):                      # the server sees the tab go
            with urllib.request.urlopen(urllib.request.Request(f"{api}/kernels/{kid}", headers=hdr), timeout=10) as r:
                if json.load(r).get("connections", 0) == 0:
                    break
            await asyncio.sleep(0.25)


# ---- plots ----------------------------------------------------------------------------------------

def _png_width(path):
    import struct
    return struct.unpack(">II", path.read_bytes()[16:24])[0]


def test_plots_are_readable_and_return_figures(tmp_path, monkeypatch):
    from kernellab import bench, plot
    monkeypatch.setattr(plot, "FIGURES", tmp_path)
    cases = [((4096, 4096), "float32"), ((32768, 1024), "float32")]
    res = bench.compare(softmax, cases)
    sw = bench.compare(softmax, [(s, "float32") for s in softmax.SWEEP])
    if res.empty or sw.empty:
        pytest.skip("no recorded or live softmax results to plot")
    for fig, name in [(plot.sweep(sw, "t_sweep", title="t", logy=True), "t_sweep"),
                      (plot.bars(res, "t_bars", title="t"), "t_bars"),
                      (plot.progress(res, "t_progress", title="t"), "t_progress")]:
        assert fig is not None and type(fig).__name__ == "Figure", name
        assert _png_width(tmp_path / f"{name}.png") <= 1000, name
        texts = [t for ax in fig.axes for t in ax.texts + ax.get_xticklabels() + ax.get_yticklabels()
                 + [ax.title, ax.xaxis.label, ax.yaxis.label] if t.get_text()]
        for ax in fig.axes:
            if ax.get_legend():
                texts += ax.get_legend().get_texts()
        assert min(t.get_fontsize() for t in texts) >= 9, name
    ax = plot.sweep(sw, "t_sweep2", logy=True).axes[0]
    styles = [(ln.get_linestyle(), ln.get_marker()) for ln in ax.get_lines() if not ln.get_label().startswith(("copy", "read"))]
    assert len(set(styles)) == len(styles), "every line has its own style"
    fig = plot.sweep(sw, "t_sweep3", logy=True)
    fig.canvas.draw()
    leg = fig.axes[0].get_legend().get_window_extent()
    box = fig.axes[0].get_window_extent()
    assert leg.x0 >= box.x1, "the legend sits outside the data"


def test_headline_draws_from_recorded_results(tmp_path, monkeypatch):
    from kernellab import device, labs, plot
    if not device.recorded_meta():
        pytest.skip("nothing recorded")
    monkeypatch.setattr(plot, "FIGURES", tmp_path)
    monkeypatch.setattr(device, "FIGURES", tmp_path)      # headline() writes its table there: not into the repo
    rows = labs.headline_rows()
    assert {"softmax", "rmsnorm", "add"} <= set(rows["family"])
    assert labs.headline() is not None and _png_width(tmp_path / "headline.png") <= 1000


# ---- explorers without a widget front end ---------------------------------------------------------

def test_explorers_print_a_table_without_widgets(capsys):
    from kernellab import explore
    explore.softmax(cols=3000, width=4)
    explore.rmsnorm(rows=100, path="float16")
    out = capsys.readouterr().out
    assert "softmax" in out or "05_online_vec4" in out
    assert ("RECORDED" in out or "measured in this session" in out or "no recorded" in out)


def test_env_exports_only_on_jetson():
    p = subprocess.run(["scripts/env.sh", "--exports"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    jetson = Path("/etc/nv_tegra_release").exists()
    assert ("CUDA_PATH" in p.stdout) == jetson


# ---- the learner's machine: CuPy for the driver, Jetson clocks, JupyterLab start ----------------

def _fake_bin(tmp_path, name, script):
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / name).write_text("#!/bin/sh\n" + script)
    (d / name).chmod(0o755)
    return d


@pytest.mark.parametrize("banner,extra", [("CUDA Version: 13.0", "gpu13"), ("CUDA Version: 12.4", "gpu"),
                                          (None, "ci")])
def test_env_picks_the_cupy_for_the_driver(tmp_path, banner, extra):
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("a Jetson always gets the jetson extra")
    path = "/usr/bin:/bin"
    if banner is None and any(Path(b, "nvidia-smi").exists() for b in ("/usr/bin", "/bin")):
        pytest.skip("this machine has a real nvidia-smi in /usr/bin: the no-GPU case cannot be faked here")
    if banner:
        d = _fake_bin(tmp_path, "nvidia-smi", 'if [ "$1" = -L ]; then echo "GPU 0: Tesla T4"; exit 0; fi\n'
                      f'echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   {banner}     |"\n')
        path = f"{d}:{path}"
    p = subprocess.run(["bash", "scripts/env.sh", "--extra"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PATH": path})
    assert p.returncode == 0 and p.stdout.split("\t")[0] == extra, p.stdout + p.stderr
    try:
        import tomllib
    except ImportError:                                    # Python 3.10 (JetPack 6)
        tomllib = pytest.importorskip("tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extra in extras
    assert any("cupy-cuda13x" in r for r in extras["gpu13"]) and any("cupy-cuda12x" in r for r in extras["jetson"])
    assert any(r.startswith("pytest-xdist") for r in extras["test"])


def test_jetson_clocks_reads_power_mode_and_clocks(tmp_path, monkeypatch):
    from kernellab.core import device
    root = tmp_path / "root"
    gpu = root / "sys/class/devfreq/17000000.gpu"
    emc = root / "sys/kernel/debug/bpmp/debug/clk/emc"
    for d in (root / "etc", gpu, emc):
        d.mkdir(parents=True)
    (root / "etc/nv_tegra_release").write_text("# R36 (release), REVISION: 4.3\n")
    for f, v in {gpu / "cur_freq": 306000000, gpu / "min_freq": 306000000, gpu / "max_freq": 1300500000,
                 emc / "rate": 2133000000, emc / "max_rate": 3199000000}.items():
        f.write_text(f"{v}\n")
    d = _fake_bin(tmp_path, "nvpmodel", 'echo "NV Power Mode: MAXN"\necho 0\n')
    monkeypatch.setenv("PATH", f"{d}:{os.environ['PATH']}")
    r = device.jetson_clocks(str(root))
    assert r["power_mode"] == "MAXN" and r["power_mode_id"] == 0
    assert (r["gpu_clock_min_mhz"], r["gpu_clock_max_mhz"], r["emc_clock_mhz"]) == (306, 1300, 2133)
    assert r["clocks_fixed"] is False and "jetson_clocks" in r["warning"]
    (gpu / "min_freq").write_text("1300500000\n")
    (emc / "rate").write_text("3199000000\n")
    r = device.jetson_clocks(str(root))
    assert r["clocks_fixed"] is True and r["warning"] == ""
    assert device.jetson_clocks(str(tmp_path / "not-a-jetson")) == {}


def test_lab_reuses_a_running_server_and_names_a_moved_port(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("labtool", ROOT / "scripts" / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    opts = lab.server_options()
    for uid in (0, 1000):                                  # each option once, as root and not (a second
        monkeypatch.setattr(lab.os, "geteuid", lambda: uid)   # --ServerApp.open_browser is a start-up error)
        keys = [o.split("=")[0] for o in lab.server_options()]
        assert len(keys) == len(set(keys)), keys
    monkeypatch.undo()
    assert "--LabApp.news_url=None" in opts and "--ServerApp.ip=127.0.0.1" in opts
    assert "--ServerApp.port_retries=0" in opts            # never a silent move to another port
    overrides = json.loads((lab.SETTINGS / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    root = tmp_path / "my-labs"
    root.mkdir()
    monkeypatch.setattr(lab, "_running", lambda r: [("http://127.0.0.1:8888/lab?token=abc", root.resolve(), 8888)])
    monkeypatch.setattr(lab.os, "execv", lambda *a: pytest.fail("started a second server"))
    assert lab.main([str(root)]) == 0
    assert "already running" in capsys.readouterr().out
    with socket.socket() as busy:                          # the port taken by another server
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        started = []
        monkeypatch.setenv("KERNELLAB_PORT", str(port))
        monkeypatch.setattr(lab, "_running", lambda r: [("http://x", (tmp_path / "elsewhere").resolve(), port)])
        monkeypatch.setattr(lab.os, "execv", lambda exe, cmd: started.append(cmd))
        lab.main([str(root)])
    out = capsys.readouterr().out
    assert started and f"--ServerApp.port={port}" not in started[0]
    assert f"port {port} is in use" in out and "listens on port" in out


def test_cloud_setup_picks_the_cupy_for_the_driver(tmp_path):
    """The hosted-runtime first cell (scripts/cloud_setup.py --print: no network): the pip command
    installs the clone with the extra scripts/env.sh picks for the runtime's driver."""
    if Path("/etc/nv_tegra_release").exists():
        pytest.skip("a Jetson always gets the jetson extra")
    d = _fake_bin(tmp_path, "nvidia-smi", 'if [ "$1" = -L ]; then echo "GPU 0: Tesla T4"; exit 0; fi\n'
                  'echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: 13.0     |"\n')
    p = subprocess.run([sys.executable, "scripts/cloud_setup.py", "--print"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PATH": f"{d}:{os.environ['PATH']}"})
    assert p.returncode == 0, p.stderr
    if "keeping the cupy" in p.stdout:
        pytest.skip("a working CuPy is installed here: the set-up keeps it")
    assert "cupy-cuda13x" in p.stdout and f"-e '{ROOT}[gpu13]'" in p.stdout, p.stdout


def test_make_lab_says_when_a_kept_copy_is_of_an_older_lab(tmp_path, capsys):
    """A learner's copy is never overwritten; when the lab it was made from has changed since,
    `make lab` says so and names `make reset`."""
    import nbformat
    dest = tmp_path / "my-labs"
    nbtool.learner(dest, only="01")
    mine = dest / next(p.name for p in dest.glob("01_*.ipynb"))
    nb = nbformat.read(mine, as_version=4)
    nb.metadata["kernellab"]["lab_stamp"] = "an older lab"
    nb.cells.append(nbformat.v4.new_markdown_cell("MY NOTES"))
    nbformat.write(nb, mine)
    capsys.readouterr()
    nbtool.learner(dest, only="01")
    out = capsys.readouterr().out
    assert "has changed since your copy" in out and "make reset LAB=01" in out
    assert "MY NOTES" in mine.read_text()


def test_names_saved_notebooks_use_stay_importable():
    """Names earlier versions of the labs called (found by scanning every committed version of the
    notebooks) resolve in the current package."""
    from kernellab import attention, decoder, softmax, vision, vit_block
    for mod, name in ((kl.bench, "ncu"), (kl.bench, "NCU_METRICS"), (kl.bench, "TABLE_COLUMNS"),
                      (kl.bench, "fundamentals"), (softmax, "device_facts"), (vision, "frac"),
                      (vision, "ptx_claims"), (decoder, "quantised_limits"), (attention, "check_variants"),
                      (vit_block, "sentence"), (vit_block, "shares"), (vit_block, "plot_breakdown")):
        assert callable(getattr(mod, name)) or isinstance(getattr(mod, name), (list, dict)), (mod.__name__, name)
    assert list(vit_block.shares(None, None).columns)[:2] == ["N", "what"]     # lab 06 once passed the graph run too
