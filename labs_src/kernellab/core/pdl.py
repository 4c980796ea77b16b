"""Programmatic dependent launch (PDL, sm_90 and newer): a kernel launched with the
programmatic-stream-serialization attribute may start before the kernel ahead of it in the stream
has finished, as soon as every block of that kernel has executed `griddepcontrol.launch_dependents`
(or exited). It must then execute `griddepcontrol.wait` before it reads anything the kernel ahead
wrote: the wait returns once that kernel has completed and its writes are visible. Inside a stream
capture the launch becomes a programmatic edge of the CUDA graph.

CuPy's RawKernel call takes no launch attributes, so this launches through the driver's
cuLaunchKernelEx (ctypes), with the same grid, block, packed arguments and shared memory as
core.launch.launch. Its host cost is a few microseconds more a call than CuPy's launch, which is why
lab 08 uses it only while a token step is captured into a graph (the replay pays no host cost)."""
from __future__ import annotations

import ctypes
import functools

import numpy as np

_PROGRAMMATIC_STREAM_SERIALIZATION = 6      # CUlaunchAttributeID (cuda.h)


class _Attr(ctypes.Structure):               # CUlaunchAttribute: an id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _Config(ctypes.Structure):             # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_Attr)), ("n_attrs", ctypes.c_uint)]


_LAUNCH = None


def _driver():
    global _LAUNCH
    if _LAUNCH is None:
        fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        _LAUNCH = fn
    return _LAUNCH


@functools.lru_cache(maxsize=None)
def supported() -> bool:
    """Whether this GPU runs griddepcontrol (compute capability 9.0 or newer) and its driver has cuLaunchKernelEx."""
    from .device import info, is_live
    if not is_live() or int(info()["cc"].split(".")[0]) < 9:
        return False
    try:
        _driver()
    except (OSError, AttributeError):
        return False
    return True


def launch(kernel, grid: tuple, block: tuple, args: tuple, smem: int = 0) -> None:
    """Launch a RawKernel as a programmatic dependent on the current stream. `args`: as
    core.launch.kernel_args packs them (cupy arrays, NumPy scalars)."""
    import cupy
    held = [np.array(a.data.ptr, np.uint64) if isinstance(a, cupy.ndarray) else np.asarray(a) for a in args]
    params = (ctypes.c_void_p * len(held))(*[h.ctypes.data for h in held])
    attr = _Attr(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1
    cfg = _Config((ctypes.c_uint * 3)(*grid, *(1,) * (3 - len(grid))),
                  (ctypes.c_uint * 3)(*block, *(1,) * (3 - len(block))), smem,
                  cupy.cuda.get_current_stream().ptr, ctypes.pointer(attr), 1)
    rc = _driver()(ctypes.byref(cfg), kernel.kernel.ptr, params, None)
    if rc:
        raise RuntimeError(f"cuLaunchKernelEx: CUDA driver error {rc} launching {kernel.name}")
