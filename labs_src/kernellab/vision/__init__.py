"""Vision family (seed 000): the kernels of Qwen3-VL's vision tower (OrinMLLM's
vision_encoder_kernel.cu), each before -> after, with float64 NumPy references.

Dimensions (Qwen3-VL's ViT): hidden 1152, 16 heads x 72, MLP 4304, 27 layers, patch_dim 1536
(3 channels x 2 frames x 16 x 16), merger 4608 -> 4608 -> 4096, learned position grid 48 x 48.

Token order ("merge-window order", as Qwen2-VL / Qwen3-VL keep it): an image of grid_h x grid_w
patches (both even) is stored so that the four patches of every 2 x 2 window are consecutive
tokens. Token t sits at patch row r, column c with
    t = ((r // 2) * (grid_w // 2) + c // 2) * 4 + (r % 2) * 2 + (c % 2)
(`window_positions(grid_h, grid_w)` gives (r, c) per token). Hence the 2 x 2 spatial merge is
x.reshape(N / 4, 4 * C): merged row m is the concatenation of tokens 4m, 4m+1, 4m+2, 4m+3
(top-left, top-right, bottom-left, bottom-right of window m).

Public API (CuPy fp16 in and out; bad input raises ValueError before any launch):
    layernorm, gelu, bias_gelu, bias_add_residual, patch_embed, pos_embed_interpolate,
    spatial_merge, split_rope_transpose, transpose_head_token, softmax, replace_image_tokens,
    rope_tables
and a float64 reference for each, ref_<name> (NumPy in, float64 out), plus ref_gelu_erf.

For the lab and the harness, one family namespace per op (LAYERNORM, GELU, BIAS_GELU,
BIAS_RESIDUAL, QKV_BIAS, PATCH_EMBED, POS_INTERP, SPATIAL_MERGE, SPLIT_ROPE, TRANSPOSE, SOFTMAX,
REPLACE) with the family API (VARIANTS before -> after, BEST, BASELINES, ...), all in FAMILIES.
They share NAME = "vision" (one recorded vision.csv); their case keys start with the op.

This is the lab's face: every name of the lab is here (vision.LAYERNORM, vision.layernorm, ...). The code:
  reference.py  dimensions and constants, token order and tables, float64 references, inputs
  steps.py      per-row and element-wise ops (LayerNorm, GELU, bias + GELU, bias + residual, softmax)
  embed.py      the tower's ends: patch embedding, position grid, spatial merge, image-token replace
  layout.py     the attention layout: split + RoPE + transpose, and the transpose back
  seed.py       the seed's own forms where the course's differ: split + RoPE over fp16 [N, D] tables
                (SPLIT_ROPE_F16), and transpose_token_head_kernel ([N, H, D] -> [H, N, D], TRANSPOSE_TOKEN_HEAD)
  ablation.py   ABLATION: each bundled step's changes one at a time
  report.py     the ablation pairs, PTX instruction counts, numbers and tables the lab quotes, and the
                sentences under its tables (say_*, *_said: one call per notebook cell)
Each op's public call (the family's best step, what lab 06 builds the ViT block from) sits with its family.
"""
# ruff: noqa: F401   (the face re-exports the lab's names)
from __future__ import annotations

import functools
import re

import numpy as np

from ..core.device import torch as _torch
from ..core.family import Family
from ..core.launch import aligned, in_range, int32_size as _size_ok, launch, out_like, require, variant
from .reference import (
    BG_U, EPS, F16, FAMILY, HEAD_DIM, HEADS, HIDDEN, LAYERS, LN_BLOCK, MERGE, MLP, NAME, PATCH_DIM, POS_SIDE, SM_U,
    SR2_TILE, SR2_U, SR_TILE, THETA, TOKENS, TR_TILE, _act, _bias_gelu_input, _bias_res_input, _cast, _f64,
    _gelu_input, _grid_ok, _head_dim, interp_tables, _ln_input, _pe_input, _pi_input, _pi_ref, _qkv_input,
    ref_bias_add_residual, ref_bias_gelu, ref_gelu, ref_gelu_erf, ref_layernorm, ref_patch_embed,
    ref_pos_embed_interpolate, ref_replace_image_tokens, ref_softmax, ref_spatial_merge, ref_split_rope_transpose,
    ref_transpose_head_token, rope_angles, rope_tables, _rotate, _rp_input, _split_rope_ref, _sr_input, _sr_ref,
    _sx_input, window_positions, _xp, ref_transpose_token_head, rope_tables_f16, _rotate_full, _sr16_input, _sr16_ref,
    _th_input)
from .steps import (
    BIAS_GELU, BIAS_RESIDUAL, _BR_SHAPES, _ELT_SHAPES, FP16, GELU, GELU_ERF, LAB01_SOFTMAX, LAYERNORM, _NULL,
    QKV_BIAS, SOFTMAX, _best, bias_add_residual, bias_gelu, _bias_gelu_step, _bias_gelu_torch, _bias_res_check,
    _bias_res_cupy, _bias_res_scalar, _bias_res_torch, _bias_res_vec8, _elementwise_n, gelu, _gelu_cupy, gelu_erf,
    _gelu_erf_torch, _gelu_step, _gelu_torch, _key, layernorm, _ln_check, _ln_cupy, ln_half2_shfl, ln_scalar_tree,
    ln_shfl_scalar_loads, _ln_torch, ln_warp_vec8, _op, _qkv_cupy, _qkv_torch, _resident, softmax, _sx_check,
    sx_half2, _sx_lab01, _sx_torch, _sx_variants, _tt, _with_residual, _without_residual)
from .embed import (
    PATCH_EMBED, POS_INTERP, REPLACE, SPATIAL_MERGE, _gpu_interp, patch_embed, _pe_alloc, _pe_check, _pe_cublas,
    pe_half2_fma, pe_scalar, _pe_torch, _pi_alloc, _pi_check, _pi_cupy, _pi_step, pos_embed_interpolate,
    replace_image_tokens, _rp_check, _rp_cupy, rp_rows, _sm_alloc, _sm_check, _sm_cupy, sm_scalar, _sm_stream,
    sm_stream, sm_stream_resident, _sm_torch, sm_vec8, spatial_merge)
from .layout import (
    SPLIT_ROPE, TRANSPOSE, _gpu_rope, _grid_y, split_rope_transpose, _sr_alloc, _sr_check, sr_fma, sr_fma_scalar_v,
    sr_scalar, sr_scalar_128, _sr_seed_step, _sr_tile, sr_tile, _sr_torch, sr_vec, _tr_alloc, _tr_check, _tr_cupy,
    tr_half2, tr_input_half2, tr_input_order, _tr_tile, tr_tile, tr_tile8, _tr_torch, tr_vec8, _tr_wide,
    transpose_head_token)
from .seed import (
    SPLIT_ROPE_F16, TRANSPOSE_TOKEN_HEAD, _sr16_alloc, _sr16_check, sr16_fma, sr16_scalar, _sr16_torch,
    split_rope_transpose_f16tab, _th_alloc, _th_check, _th_cupy, th_half2, _th_torch, th_vec8, transpose_token_head)
from .ablation import (
    ABLATION, ABLATION_BIAS_GELU, ABLATION_SPLIT_ROPE, ABLATION_TRANSPOSE, _op_ablation)
from .report import (
    ABLATION_PAIRS, ABLATION_STEPS, CALLS_PER_FORWARD, _F32_OP, f32_ops, fmaf_changes, gelu_tanh_vs_erf, with_tflops,
    FMAF_STEPS, fmaf_table, pos_interp_said, say_ablation_rule, say_barriers, say_bias_gelu, say_bias_residual,
    say_fmaf, say_gelu, say_gelu_gap, say_layernorm, say_patch_embed, say_rope_fma, say_softmax, say_spatial_merge,
    say_split_rope, say_transpose)
from .report import (AS_WRITTEN, REPORT_PATCHES, as_written, as_written_claims, check_as_written,   # the report's
                     raised_note, raised_said, say_as_written)                                   # kernels as written

FAMILIES = [LAYERNORM, GELU, GELU_ERF, BIAS_GELU, BIAS_RESIDUAL, QKV_BIAS, PATCH_EMBED, POS_INTERP, SPATIAL_MERGE,
            SPLIT_ROPE, TRANSPOSE, SOFTMAX, REPLACE, *ABLATION, SPLIT_ROPE_F16, TRANSPOSE_TOKEN_HEAD]
