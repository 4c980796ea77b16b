"""Softmax family: the ladder of seed 001 (naive -> safe -> warp shuffle -> online -> vectorised)."""
from __future__ import annotations

# The face: every name the labs, the tests and a saved notebook read as softmax.X (FAMILY: core.fingerprint reads it).
from .reference import SHAPES, SWEEP, SWEEP_TOTAL, case_key, make_input, reference, reference_naive, tolerance  # noqa: F401
from .steps import (  # noqa: F401
    ABLATION, ABLATION_STEPS, BEST, CLUSTER_ELEMS, CLUSTER_FROM, CLUSTER_PAIRS, CLUSTER_STEPS, CLUSTER_THREADS, FAMILY,
    RPW_REGS, SAFE_V1_MAX_BLOCK, SHORT, VARIANTS, VEC_PER_THREAD, cluster_geometry, dispatch_table, fp16_pipelined,
    fp16_vec8, online_vec4, rows_per_warp_geometry, safe_v1)
from .report import (  # noqa: F401
    ABLATION_PAIRS, SEED_PAIRS, SOFTMAX, STEP07_PAIRS, best_per_length, dram_passes, fixed_said, fp16_said, half_said,
    kernel_run, logits_said, long_limits_text, narrow_limits_text, passes_table, ran_text)

FAMILIES = [SOFTMAX, ABLATION, SHORT]

