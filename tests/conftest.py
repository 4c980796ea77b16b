import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "labs_src"))
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

import kernellab as kl  # noqa: E402


def _test_run_tool():
    """scripts/test.py as a module (make test's runner)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_kernellab_test_run", ROOT / "scripts" / "test.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# make test: one NVRTC compile per (source, arch, options) across this run's workers and notebook
# kernels (a cache folder made for the run and removed after it; see scripts/test.py)
if os.environ.get("KERNELLAB_COMPILE_CACHE"):
    _test_run_tool().install_compile_cache()

gpu = pytest.mark.skipif(not kl.is_live(), reason="needs a CUDA GPU (live mode)")


def dev(host):
    """Host arrays -> CuPy arrays (GPU tests only)."""
    import cupy
    return [cupy.asarray(a) for a in host]


def teacher_forced(dec, cfg, Wref, prompt, n):
    """Feed the prompt and the float64 reference's greedy tokens to a GPU decoder: (normwise relative error of its
    logits against the reference's at every position, the reference's n new tokens)."""
    import numpy as np
    from kernellab import decoder as D
    ref_new, ref_z = D.reference_generate(cfg, Wref, prompt, n)
    dec.reset()
    got = []
    for t in prompt + ref_new[:-1]:
        dec.feed(t)
        got.append(dec.logits.get())
    return D.rel_err(np.array(got), ref_z), ref_new


def pytest_configure(config):
    # `make test` (scripts/test.py) runs these in a second, serial pass after the parallel one:
    # timing assertions that need a quiet GPU and host. Mark a test @pytest.mark.serial when its
    # assertion compares timings and would not hold while other workers load the machine.
    config.addinivalue_line("markers", "serial: a timing assertion that runs alone, after the parallel pass "
                                       "(make test, scripts/test.py)")


@pytest.fixture(autouse=True, scope="module")
def _hand_back_gpu_memory():
    """After each test module, the memory pools' cached blocks go back to the driver: the parallel
    workers and the notebooks nbval runs beside them share one GPU."""
    yield
    if "cupy" in sys.modules and kl.is_live():
        from kernellab.core.device import release_cached
        release_cached()


# ---- make test's distribution over xdist workers (scripts/test.py passes --dist loadfile) -----------
# loadfile keeps a file's tests, and a notebook's cells, on one worker in order. Two refinements:
# * tests/test_compile.py is split into one unit per architecture (its six learner GPUs; the tests
#   without an arch stay together): whole, it was the slowest unit of the run by minutes, on one worker;
# * the units start longest first (the notebooks, then the compile units, then the rest, the larger
#   files first), so no long unit starts last while the other workers sit idle.
SPLIT_BY_ARCH = ("tests/test_compile.py",)


def _unit(nodeid: str) -> str:
    import re
    path = nodeid.split("::")[0]
    if path in SPLIT_BY_ARCH and (m := re.search(r"\bsm_\d+", nodeid.split("::", 1)[-1])):
        return f"{path}[{m.group(0)}]"
    return path


def _rank(nodeid: str) -> int:
    path = nodeid.split("::")[0]
    return 0 if path.endswith(".ipynb") else 1 if path in SPLIT_BY_ARCH else 2


def pytest_collection_modifyitems(session, config, items):
    """Longest units first (a stable sort: a notebook's cells keep their order); the same order on
    every worker, as xdist requires. On a GPU the saved labs (tests/saved_labs) run only when named:
    beside the live suite's own notebooks, 19 notebook kernels at once exhausted an H100's memory."""
    if kl.is_live() and not any("saved_labs" in str(a) for a in config.args):
        skip = pytest.mark.skip(reason="saved labs on a GPU: run them alone, scripts/test.py tests/saved_labs")
        for it in items:
            if "saved_labs" in it.nodeid:
                it.add_marker(skip)
    if config.getoption("dist", "no") == "loadfile":
        size = {}
        for it in items:
            size[it.nodeid.split("::")[0]] = size.get(it.nodeid.split("::")[0], 0) + 1
        items.sort(key=lambda it: (_rank(it.nodeid), -size[it.nodeid.split("::")[0]]))


@pytest.hookimpl(optionalhook=True)         # a hook of pytest-xdist: absent without it (or -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SplitLoadFile(LoadFileScheduling):
        """loadfile, with tests/test_compile.py split by arch; units in collection order."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False       # keep the longest-first order above

        def _split_scope(self, nodeid):
            return _unit(nodeid)

    return SplitLoadFile(config, log)
