"""Softmax (lab 01): the sentences and pairs tables under the lab's tables, one call a cell."""
from __future__ import annotations

from ..core import device, results
from .reference import SHAPES, case_key
from .steps import BEST
from .report import kernel_run, ran_text

# The target shapes of the lab's timing section (its TARGETS), and the two fp32 cases the claims read.
TARGET_SHAPES = [SHAPES["square_4096"], SHAPES["long_rows_1024x32768"], SHAPES["short_rows_32768x1024"]]
SQUARE_F32, LONG_F32 = case_key(TARGET_SHAPES[0], "float32"), case_key(TARGET_SHAPES[1], "float32")
FP16_SQUARE, FP16_DOUBLE = "4096x4096:float16", "8192x4096:float16"

# The ablations of steps 04 and 05 (results.ablation): step 05 with one of its four changes undone, and
# step 04 against its first, two-exp version.
ABLATION_PAIRS = [
    ("04 → 05", None, "04_online", "05_online_vec4", [
        (what, "05_online_vec4", undone) for undone, what in (
            ("05_ablate_no_vec_loads", "16-byte loads"), ("05_ablate_no_reg_cache", "the row in registers"),
            ("05_ablate_no_ex2", "`ex2.approx`"), ("05_ablate_block_256", "the block sized to the row"))]),
    ("04: the one-exp update", None, "04_ablate_two_exp", "04_online", [
        ("one exp per element", "04_online", "04_ablate_two_exp")])]
# Step 07's two changes, one at a time, at the target shapes (results.ablation).
STEP07_PAIRS = [("06 → 07", "float16", "06_fp16_vec8", "07_fp16_pipelined", [
    ("the resident grid", "07_ablate_no_prefetch", "06_fp16_vec8"),
    ("the next row's loads issued early (the prefetch)", "07_fp16_pipelined", "07_ablate_no_prefetch")])]
# The seed's claims on online softmax and bank conflicts at its shapes (results.pairs rows).
SEED_PAIRS = [("online (m, d): one statistics pass fewer", "04_online", "03_warp_shuffle", SQUARE_F32),
              ("online (m, d): one statistics pass fewer", "04_online", "03_warp_shuffle", LONG_F32),
              ("sequential addressing: no bank conflicts", "02_safe_smem", "02_safe_interleaved", SQUARE_F32)]


def _fmt(v, spec=".2f", unit=""):
    return f"{v:{spec}}{unit}" if v == v else "*(not recorded yet)*"


def half_said(part) -> str:
    """Step 06 (fp16) over step 05 (fp32) at the target shapes, and the copy-roof fractions of 05, 06, 07."""
    half = [1 / results.ratio(part, "06_fp16_vec8", "05_online_vec4", case_key(s, "float16"),
                              case_key(s, "float32")) for s in TARGET_SHAPES]
    frac = lambda n, dt: [results.pick(part, n, "frac_copy", case=case_key(s, dt)) for s in TARGET_SHAPES]  # noqa: E731
    f5, f6, f7 = frac("05_online_vec4", "float32"), frac("06_fp16_vec8", "float16"), frac("07_fp16_pipelined", "float16")
    rng = lambda v: f"{min(v):.2f}–{max(v):.2f}"   # noqa: E731
    return results.unless_missing(half[0], f"Half the bytes is not half the time: step 06 (fp16) takes "
           f"**{rng(half)}** of step 05's (fp32) time at the same shapes, because it reaches only {rng(f6)} of "
           f"the copy roof where step 05 reaches {rng(f5)}; step 07, the same bytes and conversions on a resident "
           f"grid, reaches {rng(f7)} ({results.source(part)}).")


def fp16_said(part) -> str:
    """The fp16 target (0.80 of the copy roof) on the fastest launcher, and it against a same-kernel launcher."""
    said = []
    for case in (FP16_SQUARE, "32768x1024:float16"):
        if (top := results.fastest(part, case)) is None:
            continue
        same = [n for n in results.select(part, case=case, kind="variant")["name"]      # launchers of the same kernel
                if n != top and "ablate" not in n and kernel_run(n, case) == kernel_run(top, case)]
        said.append(f"at {case}, {ran_text(top, case)}: **{results.target_outcome(results.frac_band(part, top, case), 0.8)}**"
                    + (f"; {results.compare_text(part, top, same[0], case)}" if same else ""))
    return "The fp16 target (0.80 of the copy roof): " + "; ".join(said) + f" ({results.source(part)})."


def fixed_said(part) -> str:
    """Twice the rows against the time: the extra rows' rate and the time at zero rows (a fixed cost)."""
    from ..core.bench import roof_values
    best16 = results.fastest(part, FP16_SQUARE) or BEST["float16"]
    t1, t2 = (results.band(part, best16, c) for c in (FP16_SQUARE, FP16_DOUBLE))
    b1, b2 = (results.pick(part, best16, "bytes", case=c) for c in (FP16_SQUARE, FP16_DOUBLE))
    marginal = (b2 - b1) / (t2.value - t1.value) / 1e3 / roof_values(part).get("copy_gbps", float("nan"))
    fixed = results.Measured(2 * t1.value - t2.value, 2 * t1.lo - t2.hi, 2 * t1.hi - t2.lo)   # µs at zero rows (b2 = 2 b1)
    return (f"Doubling the rows adds {_fmt(t2.value - t1.value, '.1f', ' µs')} for {_fmt((b2 - b1) / 2**20, '.0f', ' MiB')}: "
            f"the extra rows of `{best16}` stream at {_fmt(marginal)} of the copy roof. The time at zero rows extrapolates "
            f"to {_fmt(fixed.value, '.1f', ' µs')} (band {_fmt(fixed.lo, '.1f')} to {_fmt(fixed.hi, '.1f')}): "
            + ("**a fixed cost per launch**, which better arithmetic does not shrink" if fixed.ok and fixed.lo > 0
               else "no fixed cost per launch stands out of the noise; at this size the time is the bytes")
            + f" ({results.source(part)}).")


def logits_said(part) -> str:
    """The logits row: one SM of the GPU, step 05's fraction of the copy roof there, and step 10 against it."""
    facts = device.facts(part)
    fc = results.pick(part, "05_online_vec4", "frac_copy", case="1x151936:float32")
    return (f"The logits row runs on 1 of the {facts['sms']} SMs of the {facts['device']}: step 05 reaches "
            f"{_fmt(fc, '.3f')} of the copy roof there; step 10 splits the row over a cluster of blocks: "
            f"{results.compare_text(part, '10_cluster', '05_online_vec4', '1x151936:float32')} "
            f"({results.source(part)}).") if facts else "No device facts for this record."
