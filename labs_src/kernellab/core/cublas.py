"""cuBLAS for the labs: gemm (cublasGemmEx) and bgemm (cublasGemmStridedBatchedEx), fp16 in, fp32
accumulation, fp16 or fp32 out (the report's cublasHgemm / cublasHgemmStridedBatched), on the current CuPy
stream, so a CUDA graph (bench.graph) captures them.

Why a ctypes binding and not CuPy's gemmEx (issue 33 item 6): CuPy's wrappers set the handle's stream
through cublas._setStream, which raises NotImplementedError during a stream capture (CuPy 13 and 14.2),
so lab 06's graphed block would lose its GEMMs. This binds the libcublas CuPy loaded (/proc/self/maps)
with its own handle. tests/test_gpu_cublas.py checks both on a GPU and prints their host cost per call."""
from __future__ import annotations

import functools

from .launch import require

_OP_N, _OP_T, _R_32F, _R_16F, _COMPUTE_32F, _GEMM_DEFAULT = 0, 1, 0, 2, 68, -1


@functools.lru_cache(maxsize=None)
def _cublas():
    import ctypes
    import ctypes.util
    import cupy
    cupy.cuda.device.get_cublas_handle()        # CuPy loads libcublas into this process
    try:
        with open("/proc/self/maps") as f:
            path = next((line.split()[-1] for line in f if "/libcublas.so" in line), None)   # (not libcublasLt)
    except OSError:
        path = None
    lib = ctypes.CDLL(path or ctypes.util.find_library("cublas") or "libcublas.so")
    i, ll, p = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(p)]
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasGemmEx.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
    lib.cublasGemmStridedBatchedEx.argtypes = [p, i, i, i, i, i, p, p, i, i, ll, p, i, i, ll, p, p, i, i, ll, i, i, i]
    h = p()
    st = lib.cublasCreate_v2(ctypes.byref(h))
    if st:
        raise RuntimeError(f"cublasCreate failed with status {st}")
    return lib, h


def _gemm_call(transa, m, n, k, A, lda, sA, B, ldb, sB, C, ldc, sC, batch, alpha, c_type=_R_16F):
    """Column-major C = alpha op(A) B on the current stream; A and B fp16, C fp16 (or _R_32F, batch 1)."""
    import ctypes
    import cupy
    lib, h = _cublas()
    lib.cublasSetStream_v2(h, cupy.cuda.get_current_stream().ptr)
    al, be = ctypes.c_float(alpha), ctypes.c_float(0.0)
    if batch == 1:
        st = lib.cublasGemmEx(h, transa, _OP_N, m, n, k, ctypes.addressof(al), A, _R_16F, lda, B, _R_16F, ldb,
                              ctypes.addressof(be), C, c_type, ldc, _COMPUTE_32F, _GEMM_DEFAULT)
    else:
        st = lib.cublasGemmStridedBatchedEx(h, transa, _OP_N, m, n, k, ctypes.addressof(al), A, _R_16F, lda, sA,
                                            B, _R_16F, ldb, sB, ctypes.addressof(be), C, _R_16F, ldc, sC,
                                            batch, _COMPUTE_32F, _GEMM_DEFAULT)
    if st:
        raise RuntimeError(f"cuBLAS GEMM failed with status {st}")


def gemm(a, w, out):
    """out = a @ w.T (fp16 or fp32 out): one cublasGemmEx, seeing column-major out^T = w a^T (w first, transposed)."""
    require(a, "a", dtype="float16", ndim=2)
    require(w, "w", dtype="float16", ndim=2)
    M, K = a.shape
    N = w.shape[0]
    if w.shape[1] != K:
        raise ValueError(f"w: expected shape [N, {K}] (K = the columns of a), got {tuple(w.shape)}")
    require(out, "out", dtype=("float16", "float32"), shape=(M, N))
    if M and N:
        _gemm_call(_OP_T, N, M, K, w.data.ptr, K, 0, a.data.ptr, K, 0, out.data.ptr, N, 0, 1, 1.0,
                   _R_32F if out.dtype.itemsize == 4 else _R_16F)
    return out


gemm_f32out = gemm      # an fp32 out selects the fp16-in, fp32-out route


def bgemm(a, b, out, *, trans_b: bool, alpha: float = 1.0):
    """out[i] = alpha * a[i] @ (b[i].T if trans_b else b[i]) per head: one cublasGemmStridedBatchedEx, fp16,
    no copy (cupy.matmul would copy a transposed K)."""
    require(a, "a", dtype="float16", ndim=3)
    require(b, "b", dtype="float16", ndim=3)
    B, M, K = a.shape
    N = b.shape[1] if trans_b else b.shape[2]
    want_b = (B, N, K) if trans_b else (B, K, N)
    if tuple(b.shape) != want_b:
        raise ValueError(f"b: expected shape {want_b}, got {tuple(b.shape)}")
    require(out, "out", dtype="float16", shape=(B, M, N))
    if B and M and N:
        _gemm_call(_OP_T if trans_b else _OP_N, N, M, K, b.data.ptr, K if trans_b else N, N * K,
                   a.data.ptr, K, M * K, out.data.ptr, N, M * N, B, alpha)
    return out
