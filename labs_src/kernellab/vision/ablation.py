"""The lab's ablations: three families that each undo one change of a bundled step at a time."""
from __future__ import annotations

from ..core.family import Family
from .layout import SPLIT_ROPE, TRANSPOSE, _sr_tile, _tr_tile, sr_tile, sr_vec, tr_tile, tr_vec8
from .reference import BG_U, FAMILY, HEAD_DIM, HEADS
from .steps import BIAS_GELU, _bias_gelu_step, _key


# Ablations: the bundled pairs of this lab, one change at a time. Each ablation kernel is
# the "after" step with ONE change undone (same launcher, same inputs, same run): time(ablation) /
# time(after) is what that change is worth given the others. One input signature per Family (the
# harness runs every variant of a family on every case), so the ablations are three families that
# share one record, vision_ablation.csv, told apart by their op (ablate_<op>); their shapes are the
# lab's.

def _op_ablation(op, base, variants, shapes, check_cases, about):
    return Family(name="vision_ablation", kernels=FAMILY, op=f"ablate_{op}", case_key=_key(f"ablate_{op}"),
                  make_input=base.make_input, reference=base.reference, bytes_moved=base.bytes_moved,
                  variants=variants, default={}, baselines={}, shapes=shapes, check_cases=check_cases,
                  record_cases=[(s, "float16") for s in shapes.values()], about=about)


ABLATION_BIAS_GELU = _op_ablation(
    "bias_gelu", BIAS_GELU,
    {"09_bias_gelu_vec8_exp": BIAS_GELU.variants["09_bias_gelu_vec8_exp"],
     "25_ablate_one_vector": _bias_gelu_step("25_ablate_one_vector", 8, 1),
     "25_ablate_signed_index": _bias_gelu_step("25_ablate_signed_index", 8, BG_U),
     "25_bias_gelu_vec8_x2": BIAS_GELU.variants["25_bias_gelu_vec8_x2"]},
    BIAS_GELU.shapes, [(s, v) for s in [(1, 1), (3, 7), (2, 31), (7, 4304), (3, 4301), (0, 8)]
                       for v in ("randn", "hostile")],
    "lab 05: step 09 -> 25, each change alone")
ABLATION_SPLIT_ROPE = _op_ablation(
    "split_rope", SPLIT_ROPE,
    {"20_split_rope_vec": sr_vec,
     "27_ablate_one_in_flight": _sr_tile("27_ablate_one_in_flight"),
     "27_ablate_index64": _sr_tile("27_ablate_index64"),
     "27_ablate_tile8": _sr_tile("27_ablate_tile8", tile=8),
     "27_ablate_one_pass": _sr_tile("27_ablate_one_pass", one_pass=True),
     "27_split_rope_tile": sr_tile},
    SPLIT_ROPE.shapes, [(s, v) for s in [(2, 2, HEADS, HEAD_DIM), (10, 14, HEADS, HEAD_DIM), (2, 2, 3, 8),
                                         (2, 4, 2, 12), (2, 18, 2, 72), (4, 2, 1, 4)] for v in ("randn", "hostile")],
    "lab 05: step 20 -> 27, each change alone")
ABLATION_TRANSPOSE = _op_ablation(
    "transpose", TRANSPOSE,
    {"22_transpose_vec8": tr_vec8,
     "28_ablate_one_in_flight": _tr_tile("28_ablate_one_in_flight"),
     "28_ablate_index64": _tr_tile("28_ablate_index64"),
     "28_ablate_no_smem": _tr_tile("28_ablate_no_smem", stage=False),
     "28_ablate_tile8": _tr_tile("28_ablate_tile8", tile=8),
     "28_transpose_tile": tr_tile},
    TRANSPOSE.shapes, [(s, v) for s in [(16, 1, 72), (16, 31, 72), (16, 100, 72), (3, 5, 7), (4, 33, 16), (0, 3, 8)]
                       for v in ("randn", "hostile")],
    "lab 05: step 22 -> 28, each change alone")
ABLATION = [ABLATION_BIAS_GELU, ABLATION_SPLIT_ROPE, ABLATION_TRANSPOSE]   # one record: vision_ablation
