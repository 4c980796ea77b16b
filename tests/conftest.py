import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "labs_src"))
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

import kernellab as kl  # noqa: E402

gpu = pytest.mark.skipif(not kl.is_live(), reason="needs a CUDA GPU (live mode)")


def dev(host):
    """Host arrays -> CuPy arrays (GPU tests only)."""
    import cupy
    return [cupy.asarray(a) for a in host]


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
