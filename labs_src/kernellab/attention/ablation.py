"""Lab 07's ablations: the two bundled steps taken apart, one change at a time (DEC_ABLATION, PF_ABLATION).

Decode 04 -> 05 changes the kernel (4 keys a tile, the next tile prefetched, one rescale per tile, step
05's launch bounds) and the chunk rule (one resident wave of blocks, chunks of >= 64 keys, where steps
03-04 cut 256-key chunks): at short lengths the rule alone launches 4x the blocks. Prefill 12 -> 13
brings cp.async and a second buffer stage. Each ablation kernel is the "after" step with one change
undone, run with the same inputs in the same run; time(ablation) / time(after) is what that change is
worth given the others. ABLATION_PAIRS is read by results.ablation for the lab's tables and sentences."""
from __future__ import annotations

from ..core.family import Family
from ..core.launch import variant
from .reference import (DEC_CHECK_CASES, DEC_LENGTHS, FAMILY, HQ, PF_CHECK_CASES, PF_HEADS, PF_NS, _tolerance,
                        dec_case_key, make_decode, make_prefill, pf_case_key, reference_decode, reference_prefill)
from .report import decode_bytes, prefill_bytes
from .steps import DEC_VARIANTS, PF_VARIANTS, _alloc_o, _alloc_pf, _pf_launch, _split


def _dec_ablation(kname, rule):
    """Kernel `kname` launched on the grid of step `rule`'s chunk rule ('04': 256-key chunks; '05': one
    resident wave of step 05's kernel, the very grid step 05 launches)."""
    def run(q, k, v, length, out=None):
        return _split(kname, rule, q, k, v, length, out)
    run.__name__ = run.__qualname__ = f"{kname[10:]}_on_{rule}_grid"
    return variant(dtypes=("float16",), alloc_out=_alloc_o)(run)


def _pf_ablation(kname):
    def run(q, k, v, out=None):
        return _pf_launch(kname, q, k, v, out)
    run.__name__ = run.__qualname__ = kname[10:]
    return variant(dtypes=("float16",), alloc_out=_alloc_pf, min_arch=80)(run)


DEC_ABLATION_VARIANTS = {
    "04_gqa": DEC_VARIANTS["04_gqa"],
    "05_ablate_tile1": _dec_ablation("attention_05_ablate_tile1", "05"),
    "05_ablate_no_prefetch": _dec_ablation("attention_05_ablate_no_prefetch", "05"),
    "05_ablate_chunks": _dec_ablation("attention_05_decode_gqa_tile", "04"),
    "05_gqa_tile": DEC_VARIANTS["05_gqa_tile"],
}
PF_ABLATION_VARIANTS = {
    "12_mma": PF_VARIANTS["12_mma"],
    "13_ablate_one_stage": _pf_ablation("attention_13_ablate_one_stage"),
    "13_ablate_reg_stages": _pf_ablation("attention_13_ablate_reg_stages"),
    "13_cp_async": PF_VARIANTS["13_cp_async"],
}

ABLATION_PAIRS = {
    "decode": ("decode 04 → 05", "float16", "04_gqa", "05_gqa_tile", [
        ("step 05's chunk rule, given step 05's kernel", "05_gqa_tile", "05_ablate_chunks"),
        ("step 05's chunk rule (and launch bounds), given one key a tile", "05_ablate_tile1", "04_gqa"),
        ("the next tile's prefetch", "05_gqa_tile", "05_ablate_no_prefetch"),
        ("4 keys a tile (one rescale per tile), no prefetch, on step 05's grid", "05_ablate_no_prefetch",
         "05_ablate_tile1"),
        ("the kernel's changes together, on step 04's grid", "05_ablate_chunks", "04_gqa")]),
    "prefill": ("prefill 12 → 13", "float16", "12_mma", "13_cp_async", [
        ("the second buffer stage, given cp.async", "13_cp_async", "13_ablate_one_stage"),
        ("cp.async, given two stages", "13_cp_async", "13_ablate_reg_stages"),
        ("cp.async alone, one stage", "13_ablate_one_stage", "12_mma"),
        ("the second stage alone, through registers", "13_ablate_reg_stages", "12_mma")]),
}
ABLATION_STEPS = {   # name -> what it is, for the lab's tables
    "04_gqa": "step 04: one key a tile, 256-key chunks",
    "05_ablate_tile1": "step 04's kernel body under step 05's launch bounds, on step 05's grid",
    "05_ablate_no_prefetch": "step 05 without the next tile's prefetch",
    "05_ablate_chunks": "step 05's kernel on step 04's grid (256-key chunks)",
    "05_gqa_tile": "step 05",
    "12_mma": "step 12: plain loads, one stage",
    "13_ablate_one_stage": "step 13 with one buffer stage (cp.async, waited for before each tile)",
    "13_ablate_reg_stages": "step 13 without cp.async (two stages, the next tile held in registers)",
    "13_cp_async": "step 13",
}

DEC_ABLATION = Family(
    name="attention_decode_ablation", kernels=FAMILY, roof="read", variants=DEC_ABLATION_VARIANTS,
    reference=reference_decode, make_input=make_decode, bytes_moved=decode_bytes, check_cases=DEC_CHECK_CASES,
    record_cases=[((HQ, n), "float16") for n in DEC_LENGTHS if n >= 64], baselines={}, default={},
    shapes={f"Qwen3-8B decode, KV length {n}": (HQ, n) for n in DEC_LENGTHS if n >= 64},
    case_key=dec_case_key, tolerance=_tolerance,
    about="lab 07: decode step 04 -> 05 (kernel and chunk rule), each change alone")
PF_ABLATION = Family(
    name="attention_prefill_ablation", kernels=FAMILY, variants=PF_ABLATION_VARIANTS, reference=reference_prefill,
    make_input=make_prefill, bytes_moved=prefill_bytes, check_cases=PF_CHECK_CASES,
    record_cases=[((PF_HEADS, n), "float16") for n in PF_NS if n >= 1024], baselines={}, default={},
    shapes={f"ViT prefill, N = {n}": (PF_HEADS, n) for n in PF_NS if n >= 1024},
    case_key=pf_case_key, tolerance=_tolerance,
    about="lab 07: prefill step 12 -> 13 (cp.async and a second stage), each change alone")
