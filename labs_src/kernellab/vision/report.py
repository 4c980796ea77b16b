"""What the lab says, computed: the ablation pairs and the names of their steps for the lab's
tables, the f32 instructions a step's PTX holds, the tanh-vs-erf GELU gap, the calls per ViT
forward, and the patch embedding's TFLOP/s."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .ablation import ABLATION_BIAS_GELU, ABLATION_SPLIT_ROPE, ABLATION_TRANSPOSE
from .embed import PATCH_EMBED, POS_INTERP, SPATIAL_MERGE
from .layout import SPLIT_ROPE, TRANSPOSE
from .reference import FAMILY, HEAD_DIM, HEADS, TOKENS, ref_gelu, ref_gelu_erf
from .seed import SPLIT_ROPE_F16, TRANSPOSE_TOKEN_HEAD
from .steps import BIAS_GELU, BIAS_RESIDUAL, GELU, GELU_ERF, LAB01_SOFTMAX, LAYERNORM, QKV_BIAS, SOFTMAX
from ..core import build, check, device, ncu, results
from ..core.family import FLOOR_TARGET, Target
from ..core.ncu import NO_COUNTERS


# label -> (the family whose frame holds them, before, after, [(the change, step with it, step without it)]).
# GELU 04 -> 05 needs no ablation kernel: its other change, __fmaf_rn, compiles to the same f32
# arithmetic (fmaf_changes("05_gelu_vec8") is False), so step 04 *is* step 05 with the width undone.
ABLATION_PAIRS = {
    "GELU 04 → 05": (GELU, "04_gelu_half2", "05_gelu_vec8", [
        ("8 halves (16 bytes) per thread", "05_gelu_vec8", "04_gelu_half2")]),
    "bias + GELU 09 → 25": (ABLATION_BIAS_GELU, "09_bias_gelu_vec8_exp", "25_bias_gelu_vec8_x2", [
        ("two vectors in flight per thread", "25_bias_gelu_vec8_x2", "25_ablate_one_vector"),
        ("unsigned 32-bit indices", "25_bias_gelu_vec8_x2", "25_ablate_signed_index")]),
    "split + RoPE 20 → 27": (ABLATION_SPLIT_ROPE, "20_split_rope_vec", "27_split_rope_tile", [
        ("3 items in flight per thread", "27_split_rope_tile", "27_ablate_one_in_flight"),
        ("the 32-bit item decode", "27_split_rope_tile", "27_ablate_index64"),
        ("16-token tiles (not 8)", "27_split_rope_tile", "27_ablate_tile8"),
        ("the loop over the tile (not one pass per thread)", "27_split_rope_tile", "27_ablate_one_pass")]),
    "transpose 22 → 28": (ABLATION_TRANSPOSE, "22_transpose_vec8", "28_transpose_tile", [
        ("3 loads in flight per thread", "28_transpose_tile", "28_ablate_one_in_flight"),
        ("the 32-bit item decode", "28_transpose_tile", "28_ablate_index64"),
        ("staging in shared memory", "28_transpose_tile", "28_ablate_no_smem"),
        ("16-token tiles (not 8)", "28_transpose_tile", "28_ablate_tile8")]),
}
ABLATION_STEPS = {   # name -> what it is, for the lab's tables
    **{k: v for _, b, a, ch in ABLATION_PAIRS.values() for k, v in (
        (b, f"step {b[:2]} (before: without " + ", ".join(c for c, _, _ in ch) + ")"),
        (a, f"step {a[:2]} (after: every change)"), *((w, f"step {a[:2]} without {c}") for c, _, w in ch))},
    "04_gelu_half2": "step 04 (before: half2 per thread; = step 05 with the width undone, see fmaf_changes)",
}

_F32_OP = re.compile(r"^(fma|mul|add|sub|neg|div|rcp|ex2|tanh|abs|min|max)(\.\w+)*\.f32\b")


def f32_ops(step, arch="sm_90", extra=()) -> dict:
    """{opcode: count} of the f32 arithmetic instructions in a step's PTX (fma, mul, add, sub, neg,
    ...; rounding and .ftz suffixes dropped), as built (extra: more NVRTC options, e.g. a -D)."""
    out: dict = {}
    for ln in build.ptx(FAMILY, step, arch, extra=tuple(extra)):
        if m := _F32_OP.match(ln):
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return dict(sorted(out.items()))


def fmaf_changes(step, arch="sm_90") -> bool:
    """Whether writing `__fmaf_rn` changes a step's f32 arithmetic: its PTX against the same file
    built with -DVL_PLAIN_FMAF, where every __fmaf_rn(a, b, c) is a * b + c (and nvcc contracts as
    it likes). False: the rewrite is no change at all in the instructions."""
    return f32_ops(step, arch) != f32_ops(step, arch, ("-DVL_PLAIN_FMAF",))


# ---- numbers the lab quotes, computed ------------------------------------------------------------

def gelu_tanh_vs_erf(lo=-8.0, hi=8.0, n=200001):
    """max |gelu_tanh(x) - gelu_erf(x)| on a fine grid, where it occurs, and the fp16 spacing there."""
    x = np.linspace(lo, hi, n)
    d = np.abs(ref_gelu(x) - ref_gelu_erf(x))
    i = int(np.argmax(d))
    g = float(ref_gelu_erf(x[i:i + 1])[0])
    return {"max_abs_diff": float(d[i]), "at_x": float(x[i]), "gelu_there": g,
            "fp16_spacing_there": float(np.spacing(np.float16(g))) if g else float(np.spacing(np.float16(0)))}


CALLS_PER_FORWARD = {   # the report's table 3.4 (one ViT forward: 27 layers, 1 merger + 3 DeepStack mergers)
    "layernorm_with_bias_fp16_kernel": 27 * 2 + 4, "bias_add_residual_fp16_kernel": 27 * 3 + 4 * 2,
    "bias_gelu_fp16_kernel": 27, "fused_split_rope_transpose_kernel": 27, "vision_softmax_fp16_kernel": 27,
    "transpose_head_token_kernel": 27, "gelu_fp16_kernel": 4, "spatial_merge_fp16_kernel": 4,
    "patch_embed_conv3d_fp16_kernel": 1, "pos_embed_interpolate_fp16_kernel": 1,
}


# ---- sentences and tables the lab computes from the results on screen -----------------------------

def with_tflops(df):
    """Patch-embedding results with a TFLOP/s column (2 N K O flops per call)."""
    df = df.copy()
    sizes = [c.split(":")[1].split("x") for c in df.get("case", [])]          # patch_embed:NxKxO:float16
    df["TFLOP/s"] = [2 * int(n) * int(k) * int(o) / t / 1e6 for (n, k, o), t in zip(sizes, df.get("median_us", []))]
    return df


def raised_note(part, name: str, case: str, roof: str = "copy") -> str:
    """Where the record of `part`'s device raised its `roof` to this very row (meta.json's roofs_raised_by),
    the sentence that says its fraction is 1.00 by construction; else ''."""
    if part is None or not len(part) or "device" not in part or (part["source"] == "live").any():
        return ""
    dev = part["device"].iloc[0]
    raised = [m.get("roofs_raised_by", {}).get(f"{roof}_gbps", "") for m in device.recorded_meta().values()
              if m.get("device") == dev]
    return (f" (this record's {roof} roof was raised to this very row, so its 1.00 holds by construction: the "
            "row beat every roof kernel lab 00 ran, and says nothing of headroom)"
            if any(r.endswith(f" {name} at {case}") for r in raised) else "")


def raised_said(part) -> str:
    """Which row, if any, the record on screen raised its copy roof to, and what that means for this lab's
    fractions (results.each_device)."""
    if part is None or not len(part) or (part["source"] == "live").any():
        return "The copy roof here is this GPU's, measured live by lab 00's kernels in this process."
    dev = part["device"].iloc[0]
    by = next((m.get("roofs_raised_by", {}).get("copy_gbps") for m in device.recorded_meta().values()
               if m.get("device") == dev), None)
    if not by:
        return f"The copy roof of this record is lab 00's own ({results.source(part)})."
    ours = by.startswith("vision.csv ")
    return (f"This record's copy roof was raised to a recorded row that beat lab 00's copy kernels: {by} "
            f"({results.source(part)}). " + ("That row is this lab's: its fraction, and a target judged on it, is "
                                             "1.00 by construction." if ours else
                                             "No row of this lab set it, so no fraction here is 1.00 by construction."))


# The sentences and tables under the lab's tables, computed from the frames on screen (none typed in); a
# notebook cell is one call.
def barriers():
    """Block barriers (`bar.sync`) per row in the PTX of LayerNorm steps 01, 02 and 03."""
    return pd.Series({s: len(build.ptx("vision", s, grep=r"bar\.sync")) for s in (
        "01_layernorm_scalar_tree", "02_layernorm_half2_shfl", "03_layernorm_warp_vec8")}, name="bar.sync per row")


def say_gelu_gap() -> None:
    """How far the tanh GELU is from the exact (erf) one, in fp16 steps (gelu_tanh_vs_erf)."""
    d = gelu_tanh_vs_erf()
    results.say(f"max |gelu_tanh − gelu_erf| = **{d['max_abs_diff']:.1e}**, at x = {d['at_x']:.2f}, where GELU is "
                f"{d['gelu_there']:.3f} and neighbouring fp16 values are {d['fp16_spacing_there']:.1e} apart: the "
                + ("approximation error is below half an fp16 step: in fp16 the two agree to within one rounding."
                   if d["max_abs_diff"] < d["fp16_spacing_there"] / 2 else
                   f"approximation error is {d['max_abs_diff'] / d['fp16_spacing_there']:.2f} fp16 steps there."))


def fmaf_table(steps=("05_gelu_vec8", "08_bias_gelu_vec8", "19_split_rope_fma")):
    """Per step: whether writing its `__fmaf_rn(a, b, c)` as `a * b + c` changes its f32 arithmetic (fmaf_changes)."""
    return pd.Series({s: fmaf_changes(s) for s in steps}, name="`a * b + c` changes the f32 arithmetic (sm_90)")


def f32_table(steps, arch="sm_90"):
    """f32_ops of each step, opcode by step, with their total."""
    t = pd.DataFrame({s: f32_ops(s, arch) for s in steps}).fillna(0).astype(int)
    return pd.concat([t, t.sum().to_frame("total").T])


_N = max(TOKENS)
FASTEST = "fastest"         # in PAIRS: the fastest step at the row's case
_PE, _SM, _SR = (PATCH_EMBED.case_key((4096, 1536, 1152)), SPATIAL_MERGE.case_key((_N, 1152)),
                 SPLIT_ROPE.case_key((128, 128, 16, 72)))
# the report's kernel -> the lab's step pairs for results.pairs: (what changed, after, before, case or None: every
# case `after` has[, the report's figure]). The copy-roof fractions are the tables', the targets the targets table's.
PAIRS = {
    "layernorm_with_bias_fp16_kernel": [
        ("the report's: half2 + shuffle + FMA", "02_layernorm_half2_shfl", "01_layernorm_scalar_tree", None),
        ("a warp per row, against torch", "03_layernorm_warp_vec8", "torch F.layer_norm", None)],
    "gelu_fp16_kernel": [
        ("the report's: 8 halves per thread", "05_gelu_vec8", "04_gelu_half2", None, "4×"),
        ("tanh through one exp", "06_gelu_vec8_exp", "05_gelu_vec8", None),
        ("against torch", "06_gelu_vec8_exp", "torch F.gelu(tanh)", GELU.case_key((_N, 4304)))],
    "bias_gelu_fp16_kernel": [
        ("the report's: 8 halves per thread", "08_bias_gelu_vec8", "07_bias_gelu_half2", None, "4×"),
        ("2 vectors in flight, unsigned indices", "25_bias_gelu_vec8_x2", "09_bias_gelu_vec8_exp", None),
        ("the second vector alone (ablation)", "25_bias_gelu_vec8_x2", "25_ablate_one_vector",
         ABLATION_BIAS_GELU.case_key((_N, 4304))),
        ("against torch", FASTEST, "torch F.gelu(tanh)(x + b)", BIAS_GELU.case_key((_N, 4304)))],
    "bias_add_residual_fp16_kernel": [
        ("the report's: 8 halves, null test hoisted", "11_bias_residual_vec8", "10_bias_residual_scalar", None),
        ("against torch", "11_bias_residual_vec8", "torch.add x2 (bias+residual)", BIAS_RESIDUAL.case_key((_N, 1152)))],
    "patch_embed_conv3d_fp16_kernel": [
        ("the report's: half2 + FMA", "13_patch_embed_half2_fma", "12_patch_embed_scalar", _PE, "2×"),
        ("one cuBLAS GEMM", "cuBLAS GEMM (cupy.matmul) + bias", "13_patch_embed_half2_fma", _PE)],
    "pos_embed_interpolate_fp16_kernel": [("the report's: 3 FMA + 1 mul", "15_pos_interp_fma", "14_pos_interp_mul_add", None)],
    "spatial_merge_fp16_kernel": [
        ("the report's: 8 halves per thread", "17_spatial_merge_vec8", "16_spatial_merge_scalar", None, "4×"),
        ("a flat copy, 4 loads in flight", "26_spatial_merge_stream", "17_spatial_merge_vec8", _SM),
        ("one pass per thread (not a resident grid)", "26_spatial_merge_stream", "26_ablate_resident_grid", _SM),
        ("against a plain copy of the same bytes", FASTEST, "cupy copy (reshape)", _SM)],
    "fused_split_rope_transpose_kernel": [
        ("the report's: 128 threads, FMA, float4 V", "19_split_rope_fma", "18_split_rope_scalar", _SR),
        ("of that, the block size alone", "18_ablate_block128", "18_split_rope_scalar", _SR),
        ("of that, the float4 V copy alone", "19_split_rope_fma", "19_ablate_scalar_v", _SR),
        ("16 bytes per thread", "20_split_rope_vec", "19_split_rope_fma", None),
        ("four changes (the ablation section)", "27_split_rope_tile", "20_split_rope_vec", None),
        ("against torch", FASTEST, "torch eager (split, rope, transpose)", _SR)],
    "transpose_head_token_kernel": [
        ("the report's as written (input order)", "29_transpose_input_order", "31_transpose_input_half2", None, "4×"),
        ("the course's: 8 halves, output order", "22_transpose_vec8", "21_transpose_half2", None),
        ("token tiles in shared memory", "28_transpose_tile", "22_transpose_vec8", None),
        ("8-token tiles", "30_transpose_tile8", "28_transpose_tile", None),
        *[("the fastest against the default", FASTEST, TRANSPOSE.default["float16"], TRANSPOSE.case_key((16, n, 72)))
          for n in (_N, TOKENS[0])],
        ("against torch", FASTEST, "torch copy_ (transpose)", TRANSPOSE.case_key((16, _N, 72)))],
    "vision_softmax_fp16_kernel": [
        *[("lab 01's best fp16 step", LAB01_SOFTMAX, "23_softmax_half2_shfl", SOFTMAX.case_key((16 * n, n)))
          for n in (1024, 4096)],
        ("against torch", "23_softmax_half2_shfl", "torch.softmax", SOFTMAX.case_key((16 * 4096, 4096)))],
}


def pairs(kernel: str, *frames) -> None:
    """PAIRS[kernel] judged by results.pairs on the frames on screen (one device: the first record's, or the live
    GPU; a row without a case: every case but the ablations'), titled with its calls per forward (table 3.4)."""
    d = results.one_source(pd.concat([f for f in frames if f is not None and len(f)], ignore_index=True))
    figure = [""] if any(len(r) > 4 for r in PAIRS[kernel]) else []       # the report's column: blank where none
    rows = [(w, results.fastest(d, c) if a == FASTEST else a, b, c, *(said or figure)) for w, a, b, c0, *said in
            PAIRS[kernel] for c in ([c0] if c0 else [k for k in results.cases(d, a) if not k.startswith("ablate")])]
    results.pairs(d, rows, f"{kernel}, {CALLS_PER_FORWARD[kernel]} per ViT forward")


# ---- the lab's targets, at 16384 tokens: LayerNorm, the merge and the transpose move the bytes of the
# merge's plain copy, whose fraction is their floor (a target the copy misses is out of reach there) ----------

FLOOR_COPY = "torch copy_ (view)"      # the merge's plain copy of 16384 x 1152 halves: the targets' floor
FLOOR_CASE = SPATIAL_MERGE.case_key((max(TOKENS), 1152))      # its case: the floor of the same bytes


def _targets():
    n = max(TOKENS)
    frac = lambda c: lambda df: results.frac_band(df, results.fastest(df, c), c)                      # noqa: E731
    floor = lambda df: results.frac_band(df, FLOOR_COPY, FLOOR_CASE)                                   # noqa: E731
    goals = [(LAYERNORM, (n, 1152), 0.9, floor), (GELU, (n, 4304), 0.9, None), (BIAS_GELU, (n, 4304), 0.9, None),
             (BIAS_RESIDUAL, (n, 1152), 0.9, None), (QKV_BIAS, (n, 3456), 0.9, None),
             (SPATIAL_MERGE, (n, 1152), 0.9, floor), (TRANSPOSE, (16, n, 72), 0.9, floor),
             (SPLIT_ROPE, (128, 128, 16, 72), 0.8, None)]
    of_floor = lambda c: lambda df: results.ratio_band(df, results.fastest(df, c), FLOOR_COPY, c, slow_case=FLOOR_CASE)  # noqa: E731
    same_bytes = [(LAYERNORM, (n, 1152)), (SPATIAL_MERGE, (n, 1152)), (TRANSPOSE, (16, n, 72)),
                  (TRANSPOSE_TOKEN_HEAD, (n, 16, 72)), (GELU_ERF, (n * 1152 // 4608, 4608))]
    return [Target(f"{f.op}: the fastest step at {f.case_key(s).split(':')[1]}, fraction of the copy roof",
                   frac(f.case_key(s)), t, floor=fl) for f, s, t, fl in goals] + \
        [Target(f"{f.op}: the fastest step at {f.case_key(s).split(':')[1]}, fraction of its floor (a copy of the "
                "same bytes)", of_floor(f.case_key(s)), FLOOR_TARGET) for f, s in same_bytes] + \
        [Target(f"LayerNorm: the fastest step vs torch F.layer_norm at {c.split(':')[1]}",
                lambda df, c=c: results.ratio_band(df, results.fastest(df, c), "torch F.layer_norm", c), 2.0)
         for c in (LAYERNORM.case_key((m, 1152)) for m in (4096, n))]


TARGETS = _targets()        # with ln_sweep.TARGETS, the face's TARGETS


# ---- the report's kernels as it writes them, beside the course's own (issue 34, item 5) ----------
# (the report's kernel, where seed 000 writes it (lines), the step as written and its op, the course's step and
#  its op, what lies between them). transpose_token_head_kernel has no course's version (the report deleted it
#  as unused): beside it, its inverse, the course's transpose back, which moves the same bytes.
_WALK = "the walk: the course's goes in output order (the writes one stream), the report's in input order"
_TABLES = "the tables: the course's read fp32 [N, D/2] cos/sin, the report's fp16 [N, D] (line 377)"
_INVERSE = "none: the report deleted it as unused (line 490); beside it, its inverse (the same bytes)"
AS_WRITTEN = (
    ("transpose_head_token_kernel, before", "29, 397-405", "31_transpose_input_half2", "transpose",
     "21_transpose_half2", "transpose", _WALK),
    ("transpose_head_token_kernel, after", "42, 200-206, 397-405", "29_transpose_input_order", "transpose",
     "22_transpose_vec8", "transpose", _WALK),
    ("transpose_token_head_kernel, before", "200-206, 490", "32_transpose_token_head_half2", "transpose_token_head",
     "21_transpose_half2", "transpose", _INVERSE),
    ("transpose_token_head_kernel, after", "200-206, 490", "33_transpose_token_head_vec8", "transpose_token_head",
     "22_transpose_vec8", "transpose", _INVERSE),
    ("fused_split_rope_transpose_kernel, before", "28, 365-383", "34_split_rope_scalar_f16tab", "split_rope_f16tab",
     "18_split_rope_scalar", "split_rope", _TABLES),
    ("fused_split_rope_transpose_kernel, after", "41, 191-198, 365-383", "35_split_rope_fma_f16tab",
     "split_rope_f16tab", "19_split_rope_fma", "split_rope", _TABLES),
)
REPORT_PATCHES = 500_000 // (16 * 16)     # the report's image: --max-pixel 500000 (seed 000 line 63), 16 x 16 patches


def _as_written_families() -> dict:
    return {f.op: f for f in (TRANSPOSE, TRANSPOSE_TOKEN_HEAD, SPLIT_ROPE, SPLIT_ROPE_F16)}


def _shape(op, n):
    """The lab's shape of an op at n tokens (the split's a square grid of patches)."""
    side = int(round(n ** 0.5))
    return {"transpose": (HEADS, n, HEAD_DIM), "transpose_token_head": (n, HEADS, HEAD_DIM),
            "split_rope": (side, side, HEADS, HEAD_DIM), "split_rope_f16tab": (side, side, HEADS, HEAD_DIM)}[op]


def check_as_written() -> None:
    """Each AS_WRITTEN step and the course's beside it, checked against the float64 reference on its family's
    awkward cases (check.variants: compile-only, it says what it could not run)."""
    fams = _as_written_families()
    for op in dict.fromkeys(o for row in AS_WRITTEN for o in (row[3], row[5])):
        check.variants(fams[op], list(dict.fromkeys(s for row in AS_WRITTEN for s, o in ((row[2], row[3]), (row[4], row[5]))
                                              if o == op)))


def as_written(frames):
    """The report's kernels as written against the course's, at the lab's two token counts (4096 is the nearer
    to the report's image, at most REPORT_PATCHES patches), from the frames on screen (the device that speaks
    first): each one's time and the course's, time(as written) / time(course's) and the noise rule's word."""
    d = results.one_source(pd.concat([f for f in frames if f is not None and len(f)], ignore_index=True))
    fams = _as_written_families()
    rows = []
    for kern, lines, w, wop, c, cop, change in AS_WRITTEN:
        for n in TOKENS:
            cw, cc = fams[wop].case_key(_shape(wop, n)), fams[cop].case_key(_shape(cop, n))
            m = results.ratio_band(d, c, w, cc, cw)
            word = ("not recorded here yet" if not m.ok else "within noise" if results.within_noise(m)
                    else "course's faster" if m.value > 1 else "course's slower")
            rows.append({"the report's kernel": kern, "seed 000, lines": lines, "as written": w, "the course's": c,
                         "tokens": n, "as written µs": results.band(d, w, cw).value,
                         "course's µs": results.band(d, c, cc).value, "as written / course's": m.value,
                         "noise rule": word})
    return pd.DataFrame(rows).round(2)


def as_written_claims(res):
    """The lab's claims rows (results.claims, from the same frame) that time the report's before against its
    after, both as the report writes them: its pairs judged on its own kernels."""
    tab = results.claims("05_vision", res, list(_as_written_families().values()))
    steps = {row[2] for row in AS_WRITTEN}
    pair = [h.split(" at ")[0].split(" vs ") for h in tab["how"]] if len(tab) else []
    keep = [len(p) == 2 and set(p) <= steps for p in pair]
    return tab[keep].reset_index(drop=True) if len(tab) else tab


def say_as_written(tab, claims_tab) -> None:
    """as_written's table read out by the noise rule; why the report's own figures cannot be set beside these
    times; and the report's pairs on its own kernels (as_written_claims) by verdict."""
    if tab.empty or tab["noise rule"].eq("not recorded here yet").all():
        results.say("Not measured here and not recorded yet: a GPU (or `make bench`) times the report's kernels.")
        return
    said = []
    for word, at in tab.groupby("noise rule", sort=False):
        pairs = zip(at["as written"], at["the course's"], at["tokens"])
        said.append(f"{word} at {len(at)} of {len(tab)}" + ("" if word in ("within noise", "not recorded here yet") else
                    f" ({', '.join(f'`{w}` → `{c}` at {n} tokens' for w, c, n in pairs)})"))
    results.say("The report's kernels as written against the course's: " + "; ".join(said) + ". "
                + ("" if device.is_live() else "The checks above ran the NumPy reference only (no GPU here); "
                   "`tests/test_vision.py` runs the kernels as written on the CPU (core.emulate) against it. ")
                + "The report gives no time for these kernels (its \"4×\" is the bytes per thread, 4 → 16, not a "
                f"measurement), so there is no Orin figure to set beside them; its image had at most {REPORT_PATCHES:,} "
                "patches (`--max-pixel 500000`, 16 × 16 pixels each), nearer the 4096-token rows than the 16384.")
    if len(claims_tab):
        v = claims_tab["verdict"].where(claims_tab["verdict"].isin(results.OUTCOMES), "without a verdict here")
        results.say(f"The claims file times {len(claims_tab)} of the report's pairs on its kernels as written: "
                    + ", ".join(f"{k} **{n}**" for k, n in v.value_counts().items()) + " (the table above; a row "
                    "without a verdict here is not in this record yet).")
    else:
        results.say("No row of the claims file times one of the report's pairs on its kernels as written yet: "
                    "the lab's claims table below judges them on the course's steps (its `how` column names them).")


# ---- what limits the kernels short of their floor: the recorded Nsight Compute readings of one launch each
# (results.limiters), read by the one counter rule (core.ncu.limiter_of) -----------------------------------

DRAM, OCC, ISS = "DRAM throughput (% of peak)", "achieved occupancy (%)", "issue slots busy (%)"   # core.ncu's rows
# the steps whose launch moves the floor copy's bytes (16384 x 1152 halves in, as many out; LayerNorm adds its
# 2 x 1152 weights): their floor is that copy's fraction. Split + RoPE and the position grid move other bytes.
SAME_BYTES_AS_FLOOR = ("03_layernorm_warp_vec8", "30_gelu_erf_vec8", "33_transpose_token_head_vec8",
                       "38_gelu_erf_vec8_x2", "39_gelu_erfc_poly")


def _limit_families() -> tuple:
    return LAYERNORM, GELU_ERF, SPLIT_ROPE, TRANSPOSE_TOKEN_HEAD, POS_INTERP


def _ncu_device():
    """The GPU the vision limiter readings were recorded on (None when there are none)."""
    rec = device.load_recorded("ncu")
    rec = rec[rec["family"] == FAMILY] if len(rec) else rec
    return results.one_source(rec)["device"].iloc[0] if len(rec) else None


def vision_limits_text(lims, res=None) -> str:
    """One bullet per kernel short of its floor: its fraction of the copy roof and, where it moves the floor
    copy's bytes, that copy's (both from `res`, on the readings' GPU only: none where res has no row there),
    its DRAM, occupancy, registers and issue slots, and the one rule's verdict. lims: results.limiters of
    each of _limit_families() in order (None where nothing is recorded)."""
    lims = list(lims) if lims is not None else [None] * len(_limit_families())
    if all(t is None for t in lims):
        return NO_COUNTERS
    d = on_ncu_device(res)
    out = []
    for fam, lim in zip(_limit_families(), lims):
        step, shape, dt, _ = fam.limiter_cases()[0]
        case = fam.case_key(shape, dt)
        floor = (lambda d, s, c: results.ratio_band(d, s, FLOOR_COPY, c, slow_case=FLOOR_CASE)) \
            if step in SAME_BYTES_AS_FLOOR else None     # time(the copy of its bytes) / time(step), with its band
        out.append(limit_bullet(lim, step, case, d, floor, f"`{FLOOR_COPY}` of the same bytes"))
    return "\n".join(out)


def limit_bullet(lim, step: str, case: str, d, floor=None, floor_is: str = "") -> str:
    """One bullet of a limiter reading: the step at `case`, its fraction of the copy roof and, with floor
    (d, step, case) -> Measured, of its floor (`floor_is`) from the frame `d` (none where d has no row), its
    DRAM, occupancy, registers and issue slots, and the one counter rule's verdict."""
    col = f"{step} @ {case}"
    if lim is None or col not in lim.columns:
        return f"* `{step}` at {case.split(':')[1]}: " + NO_COUNTERS
    v = lambda row: float(lim.loc[row, col])                   # noqa: E731
    f = results.frac_band(d, step, case) if d is not None and len(d) else None
    fl = floor(d, step, case) if f is not None and floor is not None else None
    frac = ("" if f is None or not f.ok else f", **{f.value:.2f}** of the copy roof"
            + (f" and **{fl.value:.2f}** of its floor, {floor_is} (band {fl.lo:.2f}–{fl.hi:.2f}; target ≥ "
               f"{FLOOR_TARGET:g}: {results.target_outcome(fl, FLOOR_TARGET)})" if fl is not None and fl.ok else ""))
    return (f"* `{step}` at {case.split(':')[1]}{frac}: DRAM {v(DRAM):.0f}% busy, {v(OCC):.0f}% occupancy "
            f"({v('registers per thread'):.0f} registers a thread), issue slots {v(ISS):.0f}%: {ncu.limiter_of(lim, col)}.")


def on_ncu_device(res):
    """The rows of `res` from the GPU the vision limiter readings were recorded on (res itself without a
    device column; no rows when there are no readings)."""
    if res is None or not len(res) or "device" not in res:
        return res
    dev = _ncu_device()
    return results.one_source(res[res["device"] == dev]) if dev is not None else res.iloc[:0]


def say_beyond(res) -> None:
    """Steps 38 and 39 against the steps they change (30 and 38), by the noise rule, at the case the limiters
    read, and each one's fraction of its floor (the copy of the same bytes)."""
    case = GELU_ERF.case_key(*GELU_ERF.limiter_cases()[0][1:3])
    out = []
    for new, old in (("38_gelu_erf_vec8_x2", "30_gelu_erf_vec8"), ("39_gelu_erfc_poly", "38_gelu_erf_vec8_x2")):
        fl = results.ratio_band(res, new, FLOOR_COPY, case, slow_case=FLOOR_CASE)
        out.append(results.compare_text(res, new, old, case) + (
            f": **{fl.value:.2f}** of its floor (band {fl.lo:.2f}–{fl.hi:.2f}; target ≥ {FLOOR_TARGET:g}: "
            f"{results.target_outcome(fl, FLOOR_TARGET)})" if fl.ok else ""))
    results.say("; ".join(out) + ".")


def say_vision_limits(res=None) -> None:
    """vision_limits_text of the recorded readings (results.limiters of each family, their provenance said once)
    and the frame on screen."""
    results.say(vision_limits_text([results.limiters(f, quiet=i > 0) for i, f in enumerate(_limit_families())], res))
