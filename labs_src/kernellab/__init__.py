"""kernellab: the one helper package behind every lab.

build   compile kernels/<family>.cu (live: cupy.RawModule; no GPU: NVRTC for sm_87 + sm_90),
        show a step's source, ptxas -v info and PTX
check   validate inputs before a launch, compare against a NumPy reference
bench   CUDA-event timing with an L2 flush, the copy/read roofs, side-by-side comparisons
plot    the few figure kinds, each labelled live or recorded with device and date
device  device facts, live vs compile-only mode, recorded results
"""
from . import device, build, check, bench, plot  # noqa: F401
from .device import mode, is_live, banner, say, provenance  # noqa: F401
from .check import check as check_close, require, CheckError  # noqa: F401

__all__ = ["device", "build", "check", "bench", "plot", "mode", "is_live", "banner", "say", "provenance", "require", "CheckError"]
