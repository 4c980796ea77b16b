"""Lab 07: attention, which is lab 01's online softmax done tile by tile.

Two families, one kernel file (kernels/attention.cu):

DECODE   Qwen3-8B decode attention: one new query token (32 heads x 128) against an fp16 KV cache
         of 8 KV heads (grouped-query attention, 4 query heads per KV head), length 1 .. 32768.
         Bound by the bytes of the cache: naive (3 launches) -> one block per head -> split-KV
         (flash decoding) + merge -> GQA -> TILE keys in flight and a wave of chunks -> one launch,
         cp.async stages, the merge by each KV head's last block (step 06, lab 08's token step's decode).
PREFILL  Qwen3-VL's ViT attention: 16 heads x 72, N tokens, non-causal. The report's cuBLAS path
         (scores in memory) -> one query row per block (online softmax, scores stay on the SM) ->
         tensor cores (mma.sync m16n8k16, FlashAttention-2 order, head dim padded to 80) ->
         cp.async double buffering -> a padded row stride (fewer bank conflicts) -> two query tiles.

Also RoPE fused with the KV-cache append (rope_append) and an Orin model on paper. This face re-exports
every name of reference, steps, report, stale, prose, causal and ablation, so `A.decode` reads as before.
"""
from __future__ import annotations

# Lab 07's names as one module (the notebooks, lab 08's decoder and the tests spell them A.<name>), the
# core names the module had among them too (a recorded row's fingerprint follows A.<name> by name).
from ..core.device import ORIN_PEAK_GBPS  # noqa: F401
from ..core.device import ORIN_SMS as _ORIN_SMS  # noqa: F401
from ..core.family import Family, Target  # noqa: F401
from ..core.launch import host_or_device_index, launch, require, variant, workspace  # noqa: F401
from .reference import (  # noqa: F401
    D, DEC_CHECK_CASES, DEC_CHECK_LENGTHS, DEC_LENGTHS, DEC_SCALE, FAMILY, GROUP, HKV, HQ, LOG2E, PF_CHECK_CASES,
    DEC_LAYOUTS, PF_D, PF_DP, PF_HEADS, PF_NS, PF_SCALE, THETA, TOL, _tolerance, dec_case_key, dec_layout, make_decode,
    make_partials, make_prefill, merge_reference, pf_case_key, reference_decode, reference_prefill, reference_rope,
    rope_table_host)
from .steps import (  # noqa: F401
    _SCRATCH, HEAD_DIMS, MAX_GROUP, layout_reason, specialise, DEC_BASELINES, DEC_FLOOR,
    DEC_THREADS, DEC_VARIANTS, GRAPH_DEC, INT32_ELEMS, MATMUL_DEC, MIN_CHUNK,
    PF_BASELINES, PF_SMEM, PF_VARIANTS, SDPA_DEC, SDPA_PF, SPLIT_CHUNK, TORCH_ATTN_KERNELS, _alloc_o, _alloc_pf,
    _cp_async, _cublas_path, _dec_check, _dec_torch_views, _dec_variant, _floor_dec, _gqa, _gqa_tile, _graph_05,
    _head, _matmul_decode, _mma, _naive, _need_sm80, _padded, _pf_check, _pf_launch, _row, _scratch,
    _sdpa_decode, _sdpa_prefill, _split, _splitkv, _torch, _two_tiles, _wave_05, chunks_for, decode, merge,
    prefill, rope_append, rope_args, rope_table, sdpa_backend, show_sdpa_backend)
from .report import (  # noqa: F401
    BLOCK, BLOCK_NS, CUBLAS_BLOCK, DECODE, FLASH_BLOCK, NO_COUNTERS, ORIN_BOARD, ORIN_GBPS, ORIN_SMS, PREFILL,
    SDPA_BLOCK, _worst, block_compare, block_rows, block_vs_torch, blocks_per_sm_on,
    cache_bytes, dec_roof_fraction, dec_vs_sdpa, decode_bytes, floor_outcome, targets_vs_floor,
    decode_limits_text, gqa_vs_split, gqa_vs_split_text,
    host_text, limits_list, noisy_text, orin_decode_model, pf_vs_cublas, pf_vs_sdpa, prefill_bytes,
    prefill_compare, prefill_flops, prefill_limits_text, scores_bytes, then, fp32_peak_gflops, row_step_text)
from .prose import (  # noqa: F401
    C1, C4K, C4K_PF, C32K, cublas_claim_text, say_block, say_decode, say_limits, say_noisy,
    say_prefill, attention_share_text, causal_text, credit_text, decode06_limits_text, causal_limits_text)
from .stale import each_device, other_gpus, stale_line, stale_names, stale_said  # noqa: F401

from .causal import (  # noqa: E402,F401
    CAUSAL_CHECK_CASES, CAUSAL_NS, PREFILL_CAUSAL, SDPA_CAUSAL, causal_bytes, causal_case_key, causal_flops, make_causal,
    prefill_causal, reference_causal, rope_prefill)

from .ablation import (  # noqa: E402,F401
    ABLATION_PAIRS, ABLATION_STEPS, DEC_ABLATION, DEC_ABLATION_VARIANTS, PF_ABLATION, PF_ABLATION_VARIANTS)

FAMILIES = [DECODE, PREFILL, BLOCK, PREFILL_CAUSAL, DEC_ABLATION, PF_ABLATION]
