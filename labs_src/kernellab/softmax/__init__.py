"""Softmax family: the ladder of seed 001 (naive -> safe -> warp shuffle -> online -> vectorised).

reference.py  shapes, the sweep, inputs (awkward shapes x hostile values), the float64 reference
steps.py      the launchers (the Python mirror of kernels/softmax.cu), the ablation, the baselines
report.py     the DRAM-pass model, the sweep's best steps, targets, limiters, the family, the claims
prose.py      the sentences under the lab's tables, one call a cell"""
from __future__ import annotations

# The face: every name the labs, the tests and a saved notebook read as softmax.X.
from .reference import (  # noqa: F401
    CHECK_CASES, CHECK_SHAPES, SHAPES, SWEEP, SWEEP_TOTAL, bytes_moved, case_key,
    make_input, reference, reference_naive, tolerance)
from .steps import (  # noqa: F401
    ABLATION, ABLATION_STEPS, BASELINES, BEST, CLUSTER11_THREADS, CLUSTER_ELEMS, CLUSTER_FROM,
    CLUSTER_PAIRS, CLUSTER_STEPS, CLUSTER_THREADS, FAMILY, H8_PER_THREAD, NAME, ROW_BLOCK,
    RPW_BLOCK, RPW_REGS, RPW_ROWS, SAFE_V1_MAX_BLOCK, SHORT, SHORT_SHAPES, VARIANTS,
    VEC_PER_THREAD, ablate_11_fp32_max, ablate_no_prefetch, cluster, cluster11_geometry,
    cluster_geometry, cluster_one_exp, cluster_prefetch, cluster_resident, dispatch,
    dispatch_table, fp16_pipelined, fp16_vec8, naive, online, online_two_exp, online_vec4,
    resident_blocks, resident_clusters, rows_per_warp_geometry, safe_interleaved, safe_smem,
    safe_v1, warp_per_row, warp_shuffle)
from .report import (  # noqa: F401
    HOSTILE_ROWS, L1_BYTES, LIMIT_LONG, LIMITERS, SOFTMAX, TARGETS, TORCH_SOFTMAX_KERNELS,
    best_per_length, dram_passes, kernel_run, long_limits_text, narrow_limits_text, passes_table, ran_text,
    worst_frac, worst_vs_torch)
from .prose import (  # noqa: F401
    ABLATION_PAIRS, SEED_PAIRS, STEP07_PAIRS, fixed_said, fp16_said, half_said, logits_said, say_mine,
    say_naive_sweep, say_short_rows)

FAMILIES = [SOFTMAX, ABLATION, SHORT]

