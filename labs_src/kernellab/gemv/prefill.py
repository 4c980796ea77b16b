"""GEMV's prefill: the batched steps (BATCHED), the conversions (CONVERT) and the report's cuBLAS routes."""
from __future__ import annotations

import numpy as np

from ..core.device import torch as torch_module
from ..core.family import Family
from ..core.launch import aligned, launch, out_like, require, variant
from .reference import (BPATHS, FAMILY, _batched_bytes, _batched_input, _batched_reference, _batched_tolerance,
                        _conv_input, _conv_reference, case_key)


# ---- prefill: Y[N, K] = X[N, M] . W[K, M]^T ------------------------------------------------------

def _bvalidate(X, W, path):
    xdt, wdt, _ = BPATHS[path]
    require(X, "X", dtype=xdt, ndim=2)
    require(W, "W", dtype=wdt, ndim=2)
    if X.shape[1] != W.shape[1]:
        raise ValueError(f"X and W disagree: X has M = {X.shape[1]} columns, W has {W.shape[1]}")
    N, K = X.shape[0], W.shape[0]
    if N > 65535:
        raise ValueError(f"N = {N} tokens: the grid's y dimension holds at most 65535; split the batch")
    return N, K, X.shape[1]


def _bstep(name, path, threads, wvec, xvec):
    def run(X, W, out=None):
        N, K, M = _bvalidate(X, W, path)
        out_ = out_like(out, X, "out", shape=(N, K), dtype=BPATHS[path][2])
        ok = int((M * W.itemsize) % wvec == 0 and (M * X.itemsize) % xvec == 0 and aligned(wvec, W)
                 and aligned(xvec, X))
        if N and K and M:
            launch(FAMILY, f"gemv_{name}", (K, N), (threads,), (X, W, out_, N, K, M, ok))
        elif N and K:
            out_.fill(0)
        return out_
    run.__name__ = name
    return variant(dtypes=(path,), alloc_out=lambda X, W: __import__("cupy").empty((X.shape[0], W.shape[0]),
                                                                                     BPATHS[path][2]))(run)


# ---- conversions: fp32 <-> fp16, the two ends of the report's cuBLAS route ---------------------

# In order, before -> after: the report's before (42, 43: ordinary loads), the course's before (18, 20: __ldg),
# the report's after (19, 21: 4 elements per thread, __ldg).
CONV = {"42_f32_to_f16_x2_plain": ("float32", "float16", 2), "18_f32_to_f16_x2": ("float32", "float16", 2),
        "19_f32_to_f16_x4": ("float32", "float16", 4), "43_f16_to_f32_x2_plain": ("float16", "float32", 2),
        "20_f16_to_f32_x2": ("float16", "float32", 2), "21_f16_to_f32_x4": ("float16", "float32", 4)}


def _conv_variant(name):
    src, dst, per = CONV[name]

    def run(a, out=None):
        require(a, "a", dtype=src)
        out_ = out_like(out, a, "out", shape=a.shape, dtype=dst)
        n = a.size
        if n:
            # the vector path loads per x src and stores per x dst: each base aligned to its own width
            ok = int(aligned(per * a.itemsize, a) and aligned(per * out_.itemsize, out_))
            launch(FAMILY, f"gemv_{name}", (-(-n // (256 * per)),), (256,), (a, out_, np.int64(n), ok))
        return out_
    run.__name__ = name
    return variant(dtypes=("f32_to_f16" if src == "float32" else "f16_to_f32",),
                   alloc_out=lambda a: __import__("cupy").empty(a.shape, dst))(run)


def _cupy_astype(a):
    import cupy
    o = cupy.empty(a.shape, cupy.float16 if a.dtype == cupy.float32 else cupy.float32)
    return lambda: cupy.copyto(o, a, casting="same_kind" if a.dtype == cupy.float32 else "safe")


CONVERT_SHAPES = {"prefill_512x4096": (512 * 4096,), "prefill_512x12288": (512 * 12288,)}
CONVERT = Family(
    name="gemv_convert", kernels=FAMILY, case_key=case_key, make_input=_conv_input, reference=_conv_reference,
    bytes_moved=lambda a, *_: a.nbytes + a.size * (2 if a.dtype == np.float32 else 4),
    variants={nm: _conv_variant(nm) for nm in CONV},
    default={"f32_to_f16": "19_f32_to_f16_x4", "f16_to_f32": "21_f16_to_f32_x4"},
    baselines={"cupy copyto (cast)": _cupy_astype},
    shapes=CONVERT_SHAPES,
    record_cases=[(s, dt) for dt in ("f32_to_f16", "f16_to_f32") for s in CONVERT_SHAPES.values()],
    check_cases=[((n,), v) for n in (1, 3, 5, 4097, 512 * 4096 + 3) for v in ("randn", "large", "hostile")],
)


# ---- the report's cuBLAS routes and the prefill family -------------------------------------------

def _hgemm_route(X, W):
    """The report's route for fp32 tokens x fp16 weight at batch >= 8: step 19, cublasHgemm, step 21."""
    if X.dtype != np.float32 or W.dtype != np.float16:
        return None
    import cupy
    X16 = cupy.empty(X.shape, cupy.float16)
    Y16 = cupy.empty((X.shape[0], W.shape[0]), cupy.float16)
    Y = cupy.empty((X.shape[0], W.shape[0]), cupy.float32)
    to16, to32 = CONVERT.variants["19_f32_to_f16_x4"], CONVERT.variants["21_f16_to_f32_x4"]

    def f():
        to16(X, out=X16)
        cupy.matmul(X16, W.T, out=Y16)
        return to32(Y16, out=Y)
    return f


GEMMEX = "cuBLAS GemmEx route (f16 in, f32 out)"


def _gemmex_route(X, W):
    """The report's fp16-in, fp32-out prefill: one cublasGemmEx (fp16 A, B; fp32 C and accumulation)."""
    if X.dtype != np.float16 or W.dtype != np.float16:
        return None
    import cupy
    from ..core.cublas import gemm_f32out
    Y = cupy.empty((X.shape[0], W.shape[0]), cupy.float32)
    return lambda: gemm_f32out(X, W, Y)


def _bcublas(X, W):
    if X.dtype != W.dtype:
        return None
    import cupy
    Y = cupy.empty((X.shape[0], W.shape[0]), X.dtype)
    return lambda: cupy.matmul(X, W.T, out=Y)


def _btorch(X, W):
    if X.dtype != W.dtype:
        return None
    torch = torch_module()
    if torch is None:
        return None
    tX, tW = torch.from_dlpack(X), torch.from_dlpack(W)
    return lambda: torch.nn.functional.linear(tX, tW)


BATCH_TOKENS = [1, 2, 4, 8, 16, 32, 128, 512]
VIT = (1024, 1152, 1152)      # Qwen3-VL ViT: 1024 patch tokens, hidden 1152


def crossover_cases(tokens=BATCH_TOKENS, shapes=((4096, 4096), (12288, 4096)), path="float16"):
    """Tokens 1..512 at the given (K, M): the custom batched kernels against cuBLAS."""
    return [((n, k, m), path) for k, m in shapes for n in tokens]


BATCHED_CASES = {"float16": crossover_cases(), "f32_fp16w": crossover_cases(shapes=((4096, 4096),), path="f32_fp16w"),
                 "float32": [((n, 4096, 4096), "float32") for n in (1, 8, 64)], "vit": [(VIT, "float16")]}
BATCHED = Family(
    roof="read",
    name="gemv_batched", kernels=FAMILY, case_key=case_key, make_input=_batched_input,
    reference=_batched_reference, bytes_moved=_batched_bytes, tolerance=_batched_tolerance,
    variants={"34_batched_f32_sdata": _bstep("34_batched_f32_sdata", "float32", 128, 16, 16),   # the report's before of 13
              "13_batched_f32": _bstep("13_batched_f32", "float32", 128, 16, 16),
              "40_batched_f16w_sdata": _bstep("40_batched_f16w_sdata", "f32_fp16w", 256, 4, 8),   # the report's before of 15
              "14_batched_f16w_half2": _bstep("14_batched_f16w_half2", "f32_fp16w", 256, 4, 8),
              "15_batched_f16w_half2x2": _bstep("15_batched_f16w_half2x2", "f32_fp16w", 256, 8, 16),
              "41_batched_fp16_sdata": _bstep("41_batched_fp16_sdata", "float16", 256, 4, 4),     # the report's before of 17
              "16_batched_fp16_half2": _bstep("16_batched_fp16_half2", "float16", 256, 4, 4),
              "17_batched_fp16_float4": _bstep("17_batched_fp16_float4", "float16", 256, 16, 16)},
    default={"float32": "13_batched_f32", "f32_fp16w": "15_batched_f16w_half2x2", "float16": "17_batched_fp16_float4"},
    baselines={"cuBLAS (cupy.matmul)": _bcublas, "cuBLAS Hgemm route (f32->f16, Hgemm, f16->f32)": _hgemm_route,
               GEMMEX: _gemmex_route, "torch F.linear": _btorch},
    shapes={"prefill_512x4096x4096": (512, 4096, 4096), "vit_1024x1152x1152": (1024, 1152, 1152)},
    check_cases=[((n, k, m), v) for (n, k, m) in [(1, 3, 7), (3, 33, 31), (8, 33, 1023), (9, 17, 4100), (2, 5, 8)]
                 for v in ("randn", "hostile")] + [((0, 4, 8), "randn"), ((3, 4, 0), "randn")],
    record_cases=[c for cs in BATCHED_CASES.values() for c in cs],
)
