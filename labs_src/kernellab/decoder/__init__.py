"""Lab 08: a Qwen3 decoder that generates tokens with the course's kernels.

This face keeps every public name of the one-module lab 08 and the private ones tests and torch_decoder
call; each file's docstring says its job.
"""
from __future__ import annotations

from dataclasses import replace  # noqa: F401  (decoder.replace: notebooks and tests shrink a Config with it)

from . import claims_check  # noqa: F401  (registers the seeds' model-fact checks: results.claim_measure)
from .config import (  # noqa: F401
    Config, DECODER_NAME, FAMILY, NAME, PATHS, QWEN25_7B, QWEN3_8B, SMALL, TINY, TINY_QWEN2, U_FP16)
from .weights import (  # noqa: F401
    LAYER_KEYS, ST_DTYPES, bf16_to_f32, layer_shapes, lm_head, load_checkpoint, lw, random_weights, read_safetensors,
    weight_shapes, write_safetensors)
from .reference import (  # noqa: F401
    Cache, STAGES_PER_LAYER, error_bound, ref_rmsnorm, ref_rope, ref_silu, reference_generate, reference_layer,
    reference_sequence, reference_step, rel_err, rope_angles, top2_margin)
from .bytes_model import (  # noqa: F401
    ORIN_BOARD, SEED_ROWS, bytes_per_token, bytes_table, linears, orin_model, seed_figures, seed_read_fraction)
from .steps import (  # noqa: F401
    ARGMAX, ARGMAX_MAX_BLOCKS, ARGMAX_THREADS, EMBED, EX_SHAPE, HEAD_NORM, OPS, SILU_MUL, THREADS, _argmax_input,
    _embed_input, _head_norm_input, _silu_input, argmax, argmax_blocks, argmax_into, embed, head_norm, make_silu_down,
    reference_argmax, reference_embed, reference_head_norm, reference_silu_down, reference_silu_mul, silu_down_step,
    silu_down_tolerance, silu_mul)
from .engine import (  # noqa: F401
    Decoder, GpuOps, NumpyOps)
from .measure import (  # noqa: F401
    DECODER, RECORD_CONTEXTS, RECORD_PATHS, SWAPS, SWAP_CONTEXT, Swap, _row, amdahl, breakdown, ctx_case, floor_name,
    floor_rows, gap, measure_tokens_per_s, skip_name, skip_rows, SKIPS, step_name, step_rows, swap_rows, token_steps,
    tokens_per_s)
from .report import (  # noqa: F401
    claims_table, gemv_limits, launch_share, launches_per_token, plot_tokens, ran, ran_text, say_bytes,
    say_fp16_storage, say_launches, say_orin, say_seeds, say_tokens, say_vs_torch, seed_span, tokens_text,
    TOKEN_GEMV_CASES, targets_table)
from .sample import (  # noqa: F401
    SAMPLE, Sampling, check_params, distribution, draw, margin, reference_sample, sample, sample_into,
    sample_launches, sample_reference, uniform)
from .text import (  # noqa: F401
    CHECKPOINT_NOTE, Generation, TextStream, chat_prompt, default_eos, demo_tokenizer, encode, eos_ids, generate,
    load_tokenizer, open_model, readback_cost)
from .fit import MODELS, QWEN3, check_fits, choose, device_memory, free_memory, need, param_count, weight_bytes  # noqa: F401

FAMILIES = [*OPS, DECODER]          # the new kernels' families and the token step's
