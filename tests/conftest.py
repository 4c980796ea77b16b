import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "labs_src"))
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

import kernellab as kl  # noqa: E402

gpu = pytest.mark.skipif(not kl.is_live(), reason="needs a CUDA GPU (live mode)")
