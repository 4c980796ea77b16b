"""Lab 06: Qwen3-VL's vision tower from lab 05's kernels and cuBLAS (seed 000's call graph, as
BLOCK_PLAN, MERGER_PLAN and PATCH_PLAN; seed 002 for the ViT prefill claim): random weights
from a fixed seed, float64 references of the block, the merger and the tower (NumPy, or CuPy
float64), the block in torch eager, the block and tower on the GPU, CUDA graphs, a per-op
breakdown (GPU and host time apart), tokens/s, an Orin model on paper, and record() for make bench
(reference.py, engine.py and report.py, in that order)."""
from __future__ import annotations

# The face: every name lab 06, the tests and a saved notebook read as vit_block.X.
from .. import vision as V  # noqa: F401
from ..core.cublas import bgemm, gemm  # noqa: F401
from .reference import (  # noqa: F401
    BLOCK_PLAN, DEEPSTACK, EPS, FAMILY, HEAD_DIM, HEADS, HIDDEN, LAYER_SHAPES, LAYERS, MERGE_IN, MERGE_OUT,
    MERGER_MODELS, MERGER_PLAN, MERGER_SHAPES, MLP, NAME, PATCH_DIM, PATCH_PLAN, POS_GRID, QKV, REPORT_COUNTS,
    SCALE, STAGES, U_FP16, call_counts, error_bound, make_input, make_layer, make_merger, make_patch, merge_index,
    merger_shapes, positions, ref_gelu, ref_layernorm, ref_pos_interpolate, ref_rope, ref_softmax, reference_block,
    reference_merger, reference_patch, reference_tower, rel_err, rope_cos_sin, tower_plan, validate, weights)
from .engine import (  # noqa: F401
    Block, Merger, Op, Tower, Workspace, block_ops, graph, merger_ops, patch_ops, run, torch_block)
from .report import (  # noqa: F401
    COLUMNS, GRIDS, ORIN_FP16_TFLOPS, ORIN_SMS, RECORD_NS, REPORT_PATCHES, TARGETS, VIT_BLOCK, accuracy,
    block_times, breakdown, check_block, check_graph_replay, check_merger, graph_table, graphs, grid_for, orin_model,
    orin_vs_reports, REPORTED,
    per_op, pick, plot_breakdown, ratio, record, shares, shares_table, tokens_per_s, work,
    say_amdahl, say_drawings, speed_pairs)

FAMILIES = [VIT_BLOCK]
