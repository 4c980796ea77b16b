"""What the lab says, computed: the ablation pairs and the names of their steps for the lab's
tables, the f32 instructions a step's PTX holds, the tanh-vs-erf GELU gap, the calls per ViT
forward, and the patch embedding's TFLOP/s."""
from __future__ import annotations

import re

import numpy as np

from .ablation import ABLATION_BIAS_GELU, ABLATION_SPLIT_ROPE, ABLATION_TRANSPOSE
from .reference import FAMILY, ref_gelu, ref_gelu_erf
from .steps import GELU


# label -> (the family whose frame holds them, before, after, [(the change, step with it, step without it)]).
# GELU 04 -> 05 needs no ablation kernel: its other change, __fmaf_rn, compiles to the same f32
# arithmetic (fmaf_changes("05_gelu_vec8") is False), so step 04 *is* step 05 with the width undone.
ABLATION_PAIRS = {
    "GELU 04 → 05": (GELU, "04_gelu_half2", "05_gelu_vec8", [
        ("8 halves (16 bytes) per thread", "05_gelu_vec8", "04_gelu_half2")]),
    "bias + GELU 09 → 25": (ABLATION_BIAS_GELU, "09_bias_gelu_vec8_exp", "25_bias_gelu_vec8_x2", [
        ("two vectors in flight per thread", "25_bias_gelu_vec8_x2", "25_ablate_one_vector"),
        ("unsigned 32-bit indices", "25_bias_gelu_vec8_x2", "25_ablate_signed_index")]),
    "split + RoPE 20 → 27": (ABLATION_SPLIT_ROPE, "20_split_rope_vec", "27_split_rope_tile", [
        ("3 items in flight per thread", "27_split_rope_tile", "27_ablate_one_in_flight"),
        ("the 32-bit item decode", "27_split_rope_tile", "27_ablate_index64"),
        ("16-token tiles (not 8)", "27_split_rope_tile", "27_ablate_tile8"),
        ("the loop over the tile (not one pass per thread)", "27_split_rope_tile", "27_ablate_one_pass")]),
    "transpose 22 → 28": (ABLATION_TRANSPOSE, "22_transpose_vec8", "28_transpose_tile", [
        ("3 loads in flight per thread", "28_transpose_tile", "28_ablate_one_in_flight"),
        ("the 32-bit item decode", "28_transpose_tile", "28_ablate_index64"),
        ("staging in shared memory", "28_transpose_tile", "28_ablate_no_smem"),
        ("16-token tiles (not 8)", "28_transpose_tile", "28_ablate_tile8")]),
}
ABLATION_STEPS = {   # name -> what it is, for the lab's tables
    "04_gelu_half2": "step 04 (before: half2 per thread; = step 05 with the width undone, see fmaf_changes)",
    "05_gelu_vec8": "step 05 (after: 8 halves per thread, __fmaf_rn)",
    "09_bias_gelu_vec8_exp": "step 09 (before: one vector per thread, signed int indices)",
    "25_bias_gelu_vec8_x2": "step 25 (after: both changes)",
    "25_ablate_one_vector": "step 25 with one vector per thread",
    "25_ablate_signed_index": "step 25 with signed int indices (rem.s32)",
    "20_split_rope_vec": "step 20 (before: one item per thread, 64-bit decode, 8-token tiles)",
    "27_split_rope_tile": "step 27 (after: all four changes)",
    "27_ablate_one_in_flight": "step 27 with one item in flight per thread",
    "27_ablate_index64": "step 27 with a 64-bit item decode",
    "27_ablate_tile8": "step 27 with 8-token tiles",
    "27_ablate_one_pass": "step 27 with one pass per thread (grid.z blocks per tile)",
    "22_transpose_vec8": "step 22 (before: one item per thread, 64-bit decode, no staging)",
    "28_transpose_tile": "step 28 (after: all four changes)",
    "28_ablate_one_in_flight": "step 28 with one load in flight per thread",
    "28_ablate_index64": "step 28 with a 64-bit item decode",
    "28_ablate_no_smem": "step 28 storing straight to y (no shared memory)",
    "28_ablate_tile8": "step 28 with 8-token tiles",
}

_F32_OP = re.compile(r"^(fma|mul|add|sub|neg|div|rcp|ex2|tanh|abs|min|max)(\.\w+)*\.f32\b")


def f32_ops(step, arch="sm_90", extra=()) -> dict:
    """{opcode: count} of the f32 arithmetic instructions in a step's PTX (fma, mul, add, sub, neg,
    ...; rounding and .ftz suffixes dropped), as built (extra: more NVRTC options, e.g. a -D)."""
    from ..core import build
    out: dict = {}
    for ln in build.ptx(FAMILY, step, arch, extra=tuple(extra)):
        if m := _F32_OP.match(ln):
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return dict(sorted(out.items()))


def fmaf_changes(step, arch="sm_90") -> bool:
    """Whether writing `__fmaf_rn` changes a step's f32 arithmetic: its PTX against the same file
    built with -DVL_PLAIN_FMAF, where every __fmaf_rn(a, b, c) is a * b + c (and nvcc contracts as
    it likes). False: the rewrite is no change at all in the instructions."""
    return f32_ops(step, arch) != f32_ops(step, arch, ("-DVL_PLAIN_FMAF",))


# ---- numbers the lab quotes, computed ------------------------------------------------------------

def gelu_tanh_vs_erf(lo=-8.0, hi=8.0, n=200001):
    """max |gelu_tanh(x) - gelu_erf(x)| on a fine grid, where it occurs, and the fp16 spacing there."""
    x = np.linspace(lo, hi, n)
    d = np.abs(ref_gelu(x) - ref_gelu_erf(x))
    i = int(np.argmax(d))
    g = float(ref_gelu_erf(x[i:i + 1])[0])
    return {"max_abs_diff": float(d[i]), "at_x": float(x[i]), "gelu_there": g,
            "fp16_spacing_there": float(np.spacing(np.float16(g))) if g else float(np.spacing(np.float16(0)))}


CALLS_PER_FORWARD = {   # the report's table 3.4 (one ViT forward: 27 layers, 1 merger + 3 DeepStack mergers)
    "layernorm_with_bias_fp16_kernel": 27 * 2 + 4, "bias_add_residual_fp16_kernel": 27 * 3 + 4 * 2,
    "bias_gelu_fp16_kernel": 27, "fused_split_rope_transpose_kernel": 27, "vision_softmax_fp16_kernel": 27,
    "transpose_head_token_kernel": 27, "gelu_fp16_kernel": 4, "spatial_merge_fp16_kernel": 4,
    "patch_embed_conv3d_fp16_kernel": 1, "pos_embed_interpolate_fp16_kernel": 1,
}


# ---- sentences and tables the lab computes from the results on screen -----------------------------

def with_tflops(df):
    """Patch-embedding results with a TFLOP/s column (2 N K O flops per call)."""
    df = df.copy()
    if len(df):
        keys = df["case"].str.split(":").str[1].str.split("x")
        df["TFLOP/s"] = [2 * int(k[0]) * int(k[1]) * int(k[2]) / t / 1e6 for k, t in zip(keys, df["median_us"])]
    else:
        df["TFLOP/s"] = []
    return df
