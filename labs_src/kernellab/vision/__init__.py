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

Each op: a public call (CuPy fp16 in and out, its family's best step; bad input raises ValueError before
any launch), a float64 reference ref_<op>, a family (FAMILIES, recorded in vision.csv). This face re-exports
every name of the lab.
"""
# ruff: noqa: F401   (the face re-exports the lab's names)
from __future__ import annotations

from .reference import (
    BG_U, EPS, F16, FAMILY, HEAD_DIM, HEADS, HIDDEN, LAYERS, LN_BLOCK, LN_CASES, LN_SWEEP, MERGE, MLP, NAME, PATCH_DIM,
    POS_SIDE, SM_U, SR2_TILE, SR2_U, SR_TILE, THETA, TOKENS, TR_TILE, interp_tables, ref_bias_add_residual, ref_bias_gelu,
    ref_gelu, ref_gelu_erf, ref_layernorm, ref_patch_embed, ref_pos_embed_interpolate, ref_replace_image_tokens, ref_softmax,
    ref_spatial_merge, ref_split_rope_transpose, ref_transpose_head_token, rope_angles, rope_tables, window_positions,
    _xp, ref_transpose_token_head, rope_tables_f16, _head_dim, _split_rope_ref, _sr16_ref)
from .steps import (
    BIAS_GELU, BIAS_RESIDUAL, FP16, GELU, GELU_ERF, LAB01_SOFTMAX, LAYERNORM, QKV_BIAS, SOFTMAX, bias_add_residual,
    bias_gelu, gelu, gelu_erf, layernorm, ln_half2_shfl, ln_row_block, ln_scalar_tree, ln_shfl_scalar_loads,
    ln_warp_vec8, softmax, sx_half2)
from .embed import (
    PATCH_EMBED, POS_INTERP, REPLACE, SPATIAL_MERGE, patch_embed, pe_half2_fma, pe_scalar, pos_embed_interpolate,
    replace_image_tokens, rp_rows, sm_scalar, sm_stream, sm_stream_resident, sm_vec8, spatial_merge)
from .layout import (
    SPLIT_ROPE, TRANSPOSE, split_rope_transpose, sr_fma, sr_fma_scalar_v, sr_scalar, sr_scalar_128, sr_tile, sr_vec,
    tr_half2, tr_input_half2, tr_input_order, tr_tile, tr_tile8, tr_vec8, transpose_head_token)
from .seed import (
    SPLIT_ROPE_F16, TRANSPOSE_TOKEN_HEAD, sr16_fma, sr16_scalar, split_rope_transpose_f16tab, th_half2, th_vec8,
    transpose_token_head)
from .ablation import ABLATION, ABLATION_BIAS_GELU, ABLATION_SPLIT_ROPE, ABLATION_TRANSPOSE
from .report import (
    ABLATION_PAIRS, ABLATION_STEPS, CALLS_PER_FORWARD, f32_ops, fmaf_changes, gelu_tanh_vs_erf, with_tflops,
    PAIRS, f32_table, fmaf_table, pairs, barriers, say_gelu_gap,
    AS_WRITTEN, REPORT_PATCHES, as_written, as_written_claims, check_as_written,
    raised_note, raised_said, say_as_written, NO_COUNTERS, say_beyond, say_vision_limits, vision_limits_text)

from . import ln_sweep
from .report import TARGETS as _TARGETS

TARGETS = _TARGETS + ln_sweep.TARGETS
FAMILIES = [LAYERNORM, GELU, GELU_ERF, BIAS_GELU, BIAS_RESIDUAL, QKV_BIAS, PATCH_EMBED, POS_INTERP, SPATIAL_MERGE,
            SPLIT_ROPE, TRANSPOSE, SOFTMAX, REPLACE, *ABLATION, SPLIT_ROPE_F16, TRANSPOSE_TOKEN_HEAD]
