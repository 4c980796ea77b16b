"""GEMV's ablations: each bundled pair of the ladder taken apart, one change at a time (ABLATION)."""
from __future__ import annotations

from ..core.family import Family
from .reference import (CHECK_CASES, DOWN, FAMILY, KV, QO, SHAPES, UP, VOCAB, bytes_moved, case_key, make_input,
                        reference, tolerance)
from .steps import VARIANTS, _fast, _int4_mma, _rows, _step, _tiles, _w8a16


# ---- ablations: each bundled pair of the ladder, one change at a time -----------------------------
# Steps 03 -> 04, 05 -> 06, 09 -> 10, 10 -> 22, 22 -> 27, 26 -> 28 and 25 -> 29 each make several
# changes at once. Each ablation kernel is the "after" step with ONE change undone (same launcher,
# same inputs, same run): time(ablation) / time(after) is what that change is worth given the others.
# ABLATION_PAIRS: (title, data path, before, after, [(the change, the kernel with it, without it)]),
# read by results.ablation for the lab's tables and sentences.
ABLATION_PAIRS = [
    ("03 → 04", "float32", "03_f32_float4", "04_f32_ldg", [
        ("the fmaf chain", "04_f32_ldg", "04_ablate_no_fmaf"),
        ("`__ldg`", "04_f32_ldg", "04_ablate_no_ldg"),
        ("`__restrict__`", "04_ablate_no_ldg", "04_ablate_plain"),
        ("`#pragma unroll 4` (with everything else undone: step 03 is 04_ablate_plain without fmaf and the pragma)",
         "04_ablate_plain", "03_f32_float4")]),
    ("05 → 06", "int8", "05_int8_scalar", "06_int8_char4", [
        ("the char4 + float4 loads", "06_int8_char4", "06_ablate_bytewise"),
        ("one scale per 4 elements", "06_int8_char4", "06_ablate_scale_each"),
        ("the fmaf chain", "06_int8_char4", "06_ablate_no_fmaf"),
        ("`__ldg`", "06_int8_char4", "06_ablate_no_ldg"),
        ("`__restrict__`", "06_ablate_no_ldg", "06_ablate_plain")]),
    ("09 → 10", "float16", "09_fp16_half2", "10_fp16_v2", [
        ("16-byte loads, given 4 loads in flight", "10_fp16_v2", "10_ablate_half2"),
        ("4 loads in flight, given 16-byte loads", "10_fp16_v2", "10_ablate_one_load"),
        ("16-byte loads, given 1 load in flight", "10_ablate_one_load", "09_fp16_half2")]),
    ("10 → 22", "float16", "10_fp16_v2", "22_fp16_fast", [
        ("G threads per row (split rows)", "22_fp16_fast", "22_ablate_g32"),
        ("the template's loop at a warp per row", "22_ablate_g32", "10_fp16_v2")]),
    ("22 → 27", "float16", "22_fp16_fast", "27_fp16_rows", [
        ("16 loads in flight per lane", "27_fp16_rows", "27_ablate_u4"),
        ("`L1::no_allocate` weight loads", "27_fp16_rows", "27_ablate_l1"),
        ("two rows per warp on tall matrices", "27_fp16_rows", "27_ablate_one_row"),
        ("a warp per row, at step 22's 4 loads in flight", "27_ablate_u4", "22_fp16_fast")]),
    ("26 → 28", "int4", "26_int4_awq", "28_int4_mma", [
        ("the tensor cores", "28_int4_mma", "28_ablate_cuda_cores"),
        ("several warps per 16-row tile", "28_int4_mma", "28_ablate_split1"),
        ("16-row tiles with LOP3 dequantisation, both on CUDA cores", "28_ablate_cuda_cores", "26_int4_awq")]),
    ("28 → 35", "int4", "28_int4_mma", "35_int4_pipelined", [
        ("the software pipeline", "35_int4_pipelined", "28_int4_mma")]),
    ("28 → 36", "int4", "28_int4_mma", "36_int4_tiles", [
        ("the packed scales and zero points (1 load, not 4)", "36_int4_tiles", "36_ablate_meta"),
        ("the weights in load order (contiguous 512-byte runs)", "36_ablate_meta", "28_int4_mma")]),
    ("25 → 29 (W8A16: fp16 activations, a path of its own)", "w8a16", None, "29_int8_w8a16", [
        ("the tensor cores", "29_int8_w8a16", "29_ablate_cuda_cores"),
        ("the software pipeline", "29_int8_w8a16", "29_ablate_no_pipeline"),
        ("several warps per 16-row tile", "29_int8_w8a16", "29_ablate_split1")]),
    ("29 → 37", "w8a16", "29_int8_w8a16", "37_w8a16_tiles", [
        ("the packed scales (1 load, not 2)", "37_w8a16_tiles", "37_ablate_meta"),
        ("the weights in load order (contiguous 512-byte runs)", "37_ablate_meta", "29_int8_w8a16")]),
]
ABLATION_STEPS = {   # name -> what it is, for the lab's tables (the steps themselves: their own names)
    "04_ablate_no_fmaf": "step 04 with a*b + c*d + ... added to the sum (no fmaf chain)",
    "04_ablate_no_ldg": "step 04 without __ldg (__restrict__ kept)",
    "04_ablate_plain": "step 04 without __ldg and __restrict__",
    "06_ablate_bytewise": "step 06 loading single bytes and floats (no char4 / float4)",
    "06_ablate_scale_each": "step 06 looking the scale up per element",
    "06_ablate_no_fmaf": "step 06 with a*b + c*d + ... (no fmaf chain)",
    "06_ablate_no_ldg": "step 06 without __ldg (__restrict__ kept)",
    "06_ablate_plain": "step 06 without __ldg and __restrict__",
    "10_ablate_half2": "step 10 with 4-byte half2 loads (4 in flight)",
    "10_ablate_one_load": "step 10 with one 16-byte load in flight (one accumulator)",
    "22_ablate_g32": "step 22 with G = 32 (a warp per row, as step 10)",
    "27_ablate_u4": "step 27 with 4 loads in flight per lane (step 22's)",
    "27_ablate_l1": "step 27 with plain __ldg weight loads (L1 allocated)",
    "27_ablate_one_row": "step 27 with one row per warp everywhere",
    "28_ablate_cuda_cores": "step 28 with the multiply-add on CUDA cores (fp32 FMA)",
    "28_ablate_split1": "step 28 with one warp per 16-row tile",
    "36_ablate_meta": "step 36 with the scales and zero points read from their [K, G] arrays",
    "37_ablate_meta": "step 37 with the scales read from their [K, G] array",
    "29_ablate_cuda_cores": "step 29 with the multiply-add on CUDA cores (fp32 FMA)",
    "29_ablate_no_pipeline": "step 29 without the software pipeline",
    "29_ablate_split1": "step 29 with one warp per 16-row tile",
}
_ABLATION_VARIANTS = {
    **{n: _step(n, "float32", "block128") for n in ("04_ablate_no_fmaf", "04_ablate_no_ldg", "04_ablate_plain")},
    **{n: _step(n, "int8", "block128", wvec=4) for n in ("06_ablate_bytewise", "06_ablate_scale_each",
                                                         "06_ablate_no_fmaf", "06_ablate_no_ldg", "06_ablate_plain")},
    "10_ablate_half2": _step("10_ablate_half2", "float16", "warp", wvec=4, xvec=4),
    "10_ablate_one_load": _step("10_ablate_one_load", "float16", "warp"),
    "22_ablate_g32": _fast("22_fp16_fast", threads=32),
    "27_ablate_u4": _rows("27_ablate_u4"),
    "27_ablate_l1": _rows("27_ablate_l1"),
    "27_ablate_one_row": _rows("27_fp16_rows", two_rows=False),
    "28_ablate_cuda_cores": _int4_mma("28_ablate_cuda_cores"),
    "28_ablate_split1": _int4_mma("28_int4_mma", split=1),
    "36_ablate_meta": _tiles("36_ablate_meta", "int4"),
    "37_ablate_meta": _tiles("37_ablate_meta", "w8a16"),
    "29_ablate_cuda_cores": _w8a16("29_ablate_cuda_cores"),
    "29_ablate_no_pipeline": _w8a16("29_ablate_no_pipeline"),
    "29_ablate_split1": _w8a16("29_int8_w8a16", split=1),
}
KERNEL_OF = {"22_ablate_g32": "22_fp16_fast", "27_ablate_one_row": "27_fp16_rows",   # ablations of a launch
             "28_ablate_split1": "28_int4_mma", "29_ablate_split1": "29_int8_w8a16"}   # parameter: the kernel they run
_ABL_NAMES = list(dict.fromkeys(n for _, _, b, a, ch in ABLATION_PAIRS for n in [b, a] + [k for _, w, wo in ch for k in (w, wo)] if n))  # noqa: E501
_ABL_SHAPES = {"float32": (QO, UP), "int8": (QO, UP), "float16": (KV, QO, UP, DOWN, VOCAB), "int4": (QO, UP, DOWN),
               "w8a16": (QO, UP, DOWN)}
ABLATION = Family(
    name="gemv_ablation", kernels=FAMILY, variants={n: {**VARIANTS, **_ABLATION_VARIANTS}[n] for n in _ABL_NAMES},
    reference=reference, make_input=make_input, bytes_moved=bytes_moved, tolerance=tolerance, roof="read",
    case_key=case_key, default={}, baselines={}, shapes=SHAPES,
    check_cases=[c for c in CHECK_CASES if c[0][1] in (7, 31, 4097, 4096, 4100)],
    record_cases=[(s, p) for p, shapes in _ABL_SHAPES.items() for s in shapes],
    about="lab 04's ablations: each bundled step's changes one at a time")


def unroll_pragma_changes(step, arch="sm_90") -> bool:
    """Whether the course's `#pragma unroll 4` changes a step's PTX (against -DGEMV_NO_UNROLL_PRAGMA)."""
    from ..core import build
    return build.define_changes_ptx(FAMILY, step, "GEMV_NO_UNROLL_PRAGMA", arch)
