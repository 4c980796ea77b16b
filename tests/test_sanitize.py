"""GPU only: compute-sanitizer (memcheck, racecheck, initcheck, synccheck) reports 0 errors over
every VARIANTS entry of every family (kernellab.sanitize; `make sanitize` runs the same)."""
import pytest

from conftest import gpu
from kernellab import sanitize


@gpu
def test_compute_sanitizer_clean():
    if sanitize.executable() is None:
        pytest.skip("compute-sanitizer not found (CUDA toolkit's bin/ not on PATH, no CUDA_HOME): "
                    "make sanitize needs it")
    res = sanitize.run()
    bad = {t: (e, rc, text[-3000:]) for t, (e, rc, text) in res.items() if e != 0 or rc != 0}
    assert not bad, "\n\n".join(f"{t}: {e} errors, exit {rc}\n{tail}" for t, (e, rc, tail) in bad.items())
