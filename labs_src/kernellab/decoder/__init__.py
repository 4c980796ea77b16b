"""Lab 08: a Qwen3 decoder that generates tokens with the course's kernels.

What is here, in the order the lab uses it:

Config          Qwen3-8B's shape (QWEN3_8B), a small config with Qwen3-8B's heads that a GPU test
                runs end to end (SMALL), and a tiny one for the CPU tests (TINY); Config.from_hf
                reads a checkpoint's config.json.
weights         random_weights(cfg, seed): the Hugging Face names and layouts, fp16, from a fixed
                seed (NumPy); load_checkpoint(dir, cfg): a real checkpoint's safetensors, parsed
                here with NumPy (8-byte header length, JSON header, raw little-endian tensors).
reference       float64 NumPy: one layer, one token's step with a KV cache, greedy generation,
                and the whole sequence at once (no cache) to check the cache against; with
                fp16_storage=True it rounds every tensor the GPU stores in fp16 (the error bound).
bytes model     bytes_per_token(cfg, path, context): every weight once, the KV cache to the
                current length, the logits; fp16, W8A16 and int4 (the byte counts of lab 04's
                quantisers); orin_model(): those bytes over an Orin's datasheet bandwidth, a
                model, beside the seeds' own tokens/s (seed_figures(), from docs/claims.csv).
new kernels     kernels/decoder.cu: SiLU x up, per-head q/k RMSNorm, the embedding row from a
                device-side token id, the greedy argmax (numpy.argmax's order); launchers with input
                checks, and one Family per op (SILU_MUL, HEAD_NORM, EMBED, ARGMAX) with check cases.
Decoder         the token step on a GPU: embedding -> per layer (lab 02's fused add + RMSNorm,
                lab 04's GEMVs, q/k norm, lab 07's RoPE + KV append and decode attention, SiLU x
                up) -> final norm -> lab 04's logits GEMV -> argmax; the position, the length and
                the token live in device memory, so one CUDA graph replays every token.

The package, one job per file (the face, this file, keeps every public name of the one-module lab 08,
and the private ones tests and torch_decoder call):
config.py (Config and the lab's names), weights.py (names, layouts, safetensors, checkpoints),
reference.py (float64), bytes_model.py (bytes per token, the Orin model), steps.py (the new kernels
and the exercise), engine.py (GpuOps, NumpyOps, Decoder), measure.py (tokens/s rows, floors, swaps,
the DECODER family), report.py (sentences, one call a notebook cell, and the plot).
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
    TOKEN_GEMV_CASES, alone_us, targets_table, with_fractions)
from .sample import (  # noqa: F401
    SAMPLE, Sampling, check_params, distribution, draw, margin, reference_sample, sample, sample_into,
    sample_launches, sample_reference, uniform)
from .text import (  # noqa: F401
    CHECKPOINT_NOTE, Generation, TextStream, chat_prompt, default_eos, demo_tokenizer, encode, eos_ids, generate,
    load_tokenizer, open_model, readback_cost)
from .fit import MODELS, QWEN3, check_fits, choose, device_memory, free_memory, need, param_count, weight_bytes  # noqa: F401

FAMILIES = [*OPS, DECODER]          # the new kernels' families and the token step's
