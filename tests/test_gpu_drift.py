"""GPU (live suite): today's code, called as a user calls it, against this GPU's record (make drift):
no default step and no end-to-end row beyond 1.25x its recorded time with the bands apart."""
import pytest

from kernellab.core.device import is_live

pytestmark = pytest.mark.skipif(not is_live(), reason="needs a CUDA GPU (live mode)")


@pytest.mark.serial
def test_no_drift_from_the_record():
    from kernellab import drift
    assert drift.main([]) == 0, "make drift found a live time beyond 1.25x its record (the table above)"
