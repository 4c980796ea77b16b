"""GEMV family (seed 002, the matmul report): y[K] = W[K, M] . x[M], W row-major, fp32 accumulation.

A "dtype" here names a data path, as the report's kernels do:
  float32      fp32 W, fp32 x -> fp32 y                       (matmul_kernel_cu_fp32)
  int8         int8 W + fp32 scale per 128 along M, fp32 x -> fp32 y   (matmul_kernel_cu_fp32int8)
  f32_fp16w    fp16 W, fp32 x -> fp32 y                       (optimized::gemv_fp16_*)
  float16      fp16 W, fp16 x -> fp16 y                       (gemv_pure_fp16_kernel_v2)
  int4         AWQ-style: 2 weights per byte, fp16 scale + uint8 zero per 128, fp16 x -> fp32 y
The logits head (fp16 in, fp32 out) is the family LOGITS, the prefill kernels BATCHED
(Y[N, K] = X[N, M] . W^T), the fp32 <-> fp16 conversions CONVERT; FAMILIES lists all four.

This is the lab's face: every public name of the lab is here (gemv.GEMV.variants, gemv.pack, ...).
"""
# ruff: noqa: F401   (the face re-exports the lab's names)
from __future__ import annotations

import sys
import types

from .reference import (
    CASES, DOWN, FAMILY, GROUP, INT32_MAX, KV, PATHS, QO, SHAPES, TARGET_SHAPES, UP, UP25, VOCAB, bytes_moved, case_key,
    dense_weight, dequantize_int4, dequantize_int8, make_input, quantize_int4, quantize_int8, reference, tolerance, unpack_int4)
from .layout import interleave_int4, interleave_w8a16, tiles
from .steps import (
    BASELINES, BEST, COMPUTE_ONLY, FAST, FAST_G, FAST_STREAM, FLOOR, LOGITS, ROWS_MIN_WARPS_PER_SM, TILE_SPLIT, VARIANTS,
    f32_fp16w_dispatch, fast_threads, pack, read_by, tile_split, unpack)
from .prefill import BATCH_TOKENS, BATCHED, BATCHED_CASES, CONVERT, GEMMEX
from .report import (
    GEMV, check_variants, first_win, int32_offsets, ladder, loop_instructions, orin_model, targets, time_us, waves,
    warm_vs_flushed, int4_table, w8a16_table, limits_table, AS_WRITTEN, as_written, as_written_cases,
    as_written_claims, as_written_names, as_written_ptx, check_as_written,
    PAIRS, SWITCHES, default_said, floor_text, launch_share, say_as_written, say_seed_times, switches)
from .ablation import ABLATION, ABLATION_PAIRS, ABLATION_STEPS, KERNEL_OF, unroll_pragma_changes

FAMILIES = [GEMV, LOGITS, BATCHED, CONVERT, ABLATION]

_PARTS = tuple(sys.modules[f"{__name__}.{p}"] for p in ("reference", "layout", "steps", "prefill", "report", "ablation"))
_UNSET = object()


class _Face(types.ModuleType):
    """gemv.X = v also rebinds X in the package's modules holding the same object (tests patch gemv.GROUP).
    Mutable state (VARIANTS, BEST, TILE_SPLIT, FAST_G, ...) is one object everywhere: change it in place."""

    def __setattr__(self, name, value):
        old = self.__dict__.get(name, _UNSET)
        if old is not _UNSET and not isinstance(value, types.ModuleType):
            for part in _PARTS:
                if part.__dict__.get(name, _UNSET) is old:
                    setattr(part, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Face
