"""Softmax (lab 01): the DRAM-pass model, the sweep's best steps, targets, limiters, SOFTMAX, the claims, and the
sentences and pairs tables under the lab's tables (one call a cell)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core import results
from ..core.bench import MEMCPY
from ..core.build import occupancy
from ..core.device import facts as facts_of
from ..core.family import FLOOR_TARGET, Family, Target
from ..core.ncu import NO_COUNTERS, limiter_of
from ..core.results import checked, claim_measure, devices, one_source, sweep_best, sweep_table, sweep_worst_frac, worst_ratio
from .reference import CHECK_CASES, SHAPES, SWEEP, bytes_moved, case_key, make_input, reference, tolerance
from .steps import (BASELINES, BEST, CLUSTER_FROM, FAMILY, NAME, ROW_BLOCK, VARIANTS, cluster11_geometry,
                    cluster_geometry, rows_per_warp_geometry)

# ---- where do re-reads come from? A model of DRAM passes (the lab's markdown explains it) -----------------
# L1 here is the SM's unified L1/shared-memory array (the most L1 can be).
L1_BYTES = {"sm_70": 128 << 10, "sm_75": 96 << 10, "sm_80": 192 << 10, "sm_86": 128 << 10,
            "sm_87": 192 << 10, "sm_89": 128 << 10, "sm_90": 256 << 10, "sm_100": 256 << 10,
            "sm_120": 128 << 10}


def dram_passes(cols, itemsize, blocks_per_sm, sms, l1_bytes, l2_bytes, reads=3, writes=1) -> dict:
    """The DRAM passes of a row (where its re-reads are served from) and the bound 2 / passes of the copy roof."""
    row = cols * itemsize
    per_sm, gpu = row * blocks_per_sm, row * blocks_per_sm * sms
    where = "L1" if per_sm < l1_bytes else "L2" if gpu < l2_bytes else "DRAM"   # L1 also holds smem
    passes = (reads if where == "DRAM" else 1) + writes
    return {"row KiB": row / 1024, "rows in flight per SM": blocks_per_sm, "KiB per SM": per_sm / 1024,
            "MiB on the GPU": gpu / 2**20, "re-reads from": where, "passes counted": reads + writes,
            "DRAM passes (model)": passes, "bound (2 / DRAM passes)": 2 / passes}


def passes_table(df, step="03_warp_shuffle", reads=3, threads=ROW_BLOCK):
    """Per fp32 row length: the model's DRAM passes for `step` beside the measured fraction's 2 / fraction."""
    d = one_source(df[(df["name"] == step) & (df["dtype"] == "float32")]) if len(df) else df   # one device
    facts = facts_of(d)
    if d is None or d.empty or not facts:
        return pd.DataFrame()
    occ = occupancy(FAMILY, step, threads)
    arch = facts["arch"] if (occ["arch"] == facts["arch"]).any() else "sm_90"
    blocks = int(occ[(occ["arch"] == arch) & (occ["source"] == "ptxas -v")]["blocks/SM"].iloc[0])
    rows = []
    for r in d.sort_values("cols").itertuples():
        m = dram_passes(int(r.cols), 4, blocks, facts["sms"], L1_BYTES.get(facts["arch"], 128 << 10),
                        facts["l2_bytes"], reads=reads)
        rows.append({"shape": f"{r.rows}x{r.cols}", **m, "measured fraction of copy": r.frac_copy,
                     "passes implied (2 / fraction)": 2 / r.frac_copy})
    out = pd.DataFrame(rows)
    out["device"], out["source"] = facts["device"], d["source"].iloc[0]
    return out


# ---- every shape at speed: the best step per row length, from 32 to 262144 columns (the sweep) -------------

COPY_FLOOR = MEMCPY        # the memcpy baseline, the floor of the width sweep


def _keys(lo, hi):
    """The sweep's cases with lo <= columns <= hi, fp32 and fp16."""
    return [case_key(s, dt) for s in SWEEP for dt in ("float32", "float16") if lo <= s[1] <= hi]


def worst_frac(lo, hi, floor=False):
    """The best step's worst fraction of the copy roof over lo..hi columns; floor=True: the memcpy's."""
    return lambda df: sweep_worst_frac(df, _keys(lo, hi), *(("baseline", [COPY_FLOOR]) if floor else ()))


def worst_vs_torch(df):
    """Worst over the sweep (both dtypes) of time(torch.softmax) / time(best step), with its band."""
    return worst_ratio(df, sweep_best(df, _keys(32, 2 ** 18)), "torch.softmax")


def worst_of_floor(df):
    """The best step's worst fraction of a memcpy of the same bytes over the sweep (both dtypes), with its band."""
    return worst_ratio(df, sweep_best(df, _keys(32, 2 ** 18)), COPY_FLOOR)


def kernel_run(step: str, case: str) -> str:
    """The step whose kernel `step`'s launcher runs at `case` (the hand-offs of 11-13, 10, 09): same step, same kernel."""
    shape, dt = case.split(":")
    C = int(shape.split("x")[-1])
    if step in ("11_cluster_resident", "11_ablate_fp32_max", "12_cluster_prefetch", "13_cluster_one_exp"):
        if C >= CLUSTER_FROM and cluster11_geometry(C, dt) is not None:
            return step
        step = "10_cluster"
    if step == "10_cluster":
        if C >= CLUSTER_FROM and cluster_geometry(C, dt) is not None:
            return step
        step = "09_dispatch"
    if step == "09_dispatch" and rows_per_warp_geometry(C, dt) is None:
        return "07_fp16_pipelined" if dt == "float16" else "05_online_vec4"
    return step


def ran_text(step: str, case: str) -> str:
    """'`step`', or '`step` (which runs `other`'s kernel here)' where the launcher hands the case on."""
    k = kernel_run(step, case)
    return f"`{step}`" if k == step else f"`{step}` (which runs `{k}`'s kernel here)"


def best_per_length(df, full: bool = False):
    """results.sweep_table with the step whose kernel the fastest launcher ran; full=True: every device."""
    parts = []
    for part in (devices(df) if full else devices(df)[:1]):
        out = sweep_table(part, _keys(32, 2 ** 18), "torch.softmax", COPY_FLOOR)
        if not len(out):
            continue
        out.insert(2, "kernel that ran", [kernel_run(n, c) for c, n in zip(out["case"], out["name"])])
        if full and "device" in part:
            out["device"] = part["device"].iloc[0]
        parts.append(out)
    return pd.concat(parts, ignore_index=True).round(3) if parts else pd.DataFrame()


TARGETS = (Target("best step / torch.softmax, worst over 32..262144 columns (fp32, fp16)", worst_vs_torch, 1.0),
           *(Target(f"best step, worst fraction of the copy roof, {what} columns", worst_frac(lo, hi), t, unit="",
                    floor=worst_frac(lo, hi, floor=True))
             for what, lo, hi, t in (("1K..32K", 1024, 32768, 0.90), ("64K..256K", 65536, 2 ** 18, 0.85),
                                     ("32..256", 32, 256, 0.75))),
           Target("best step, worst fraction of its memcpy floor over 32..262144 columns (fp32, fp16)", worst_of_floor,
                  FLOOR_TARGET))

# ---- what limits the long rows: Nsight Compute readings (results.limiters), and their sentence -------------

TORCH_SOFTMAX_KERNELS = "SoftMax|softmax"          # torch's softmax kernels (cunn_SoftMaxForward*, softmax_warp_*)
LIMIT_LONG = (256, 131072)                         # the 64K..256K band's middle: 2^25 elements, as the sweep
LIMIT_NARROW = (131072, 256)                        # narrow fp16 rows: the same 2^25 elements at width 256
LIMITERS = (("10_cluster", LIMIT_LONG, r"^softmax_10_cluster_fp16", "float16"),
            ("10_cluster", LIMIT_LONG, r"^softmax_10_cluster_\d", "float32"),
            ("13_cluster_one_exp", LIMIT_LONG, r"^softmax_13_", "float16"),
            ("torch.softmax", LIMIT_LONG, TORCH_SOFTMAX_KERNELS, "float16"),
            ("09_dispatch", LIMIT_NARROW, r"^softmax_", "float16"))


def long_limits_text(lim) -> str:
    """What limits steps 10 and 13 on long fp16 rows (the one rule), and torch's DRAM bytes against 10's."""
    a, t, s13 = (f"{n} @ {case_key(LIMIT_LONG, 'float16')}" for n in ("10_cluster", "torch.softmax", "13_cluster_one_exp"))
    if lim is None or not {a, t} <= set(lim.columns):
        return NO_COUNTERS
    dram = lambda c: float(lim.loc["DRAM throughput (% of peak)", c] * lim.loc["duration (ns)", c])   # noqa: E731  busy x time
    return (f"At {LIMIT_LONG[0]} × {LIMIT_LONG[1]} fp16, `10_cluster`: {limiter_of(lim, a).short}"
            + (f"; step 13, with steps 11–13's changes: {limiter_of(lim, s13).short}" if s13 in lim.columns else "")
            + f". torch's kernel keeps DRAM {lim.loc['DRAM throughput (% of peak)', t]:.0f}% busy, yet moves "
            f"{dram(t) / dram(a):.1f}× our DRAM bytes (busy × time): a row this long does not stay on chip between its passes.")


def narrow_limits_text(lim) -> str:
    """What limits `09_dispatch` on narrow fp16 rows (the one rule), at the widths short of the floor."""
    c = f"09_dispatch @ {case_key(LIMIT_NARROW, 'float16')}"
    if lim is None or c not in lim.columns:
        return NO_COUNTERS
    v = lambda row: float(lim.loc[row, c])                                    # noqa: E731
    lm = limiter_of(lim, c)                                                   # the one rule (core.ncu.limiter)
    return (f"At {LIMIT_NARROW[0]} × {LIMIT_NARROW[1]} fp16, `09_dispatch` keeps DRAM {v('DRAM throughput (% of peak)'):.0f}% "
            f"busy, its issue slots {v('issue slots busy (%)'):.0f}% and the XU pipe (exp2) "
            f"{v('XU pipe (exp2) busy (%)'):.0f}%, at {v('achieved occupancy (%)'):.0f}% occupancy "
            f"({v('registers per thread'):.0f} registers a thread): {lm}" + (
                ": a row this short is a few loads, exps and shuffles per warp, each waiting on the one before"
                if lm.kind == "latency" and lm.what == "fixed latency" else "") + ".")


SOFTMAX = Family(
    name=NAME, kernels=FAMILY, variants=VARIANTS, targets=TARGETS, reference=reference, make_input=make_input,
    bytes_moved=bytes_moved, check_cases=CHECK_CASES, baselines=BASELINES, shapes=SHAPES, default=BEST,
    tolerance=tolerance, case_key=case_key, record_cases=[(s, dt) for dt in ("float32", "float16")
                                     for s in dict.fromkeys(SWEEP + list(SHAPES.values()))],
    limiters=LIMITERS, about="lab 01: softmax, naive -> safe -> warp shuffle -> online -> vectorised -> fp16")


# ---- the seed's correctness claims (docs/claims.csv `lab:...` rows) in NumPy float32: a GPU's expf overflow and
# roundings (CuPy's -ftz=true only moves underflow). The kernels' own checks run live on a GPU.

def _naive_f32(x):
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(np.float32))
        return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


def _safe_f32(x):
    x = x.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True, dtype=np.float32)


HOSTILE_ROWS = np.array([[89.0, 0.0, 1.0, 2.0], [1000.0, 999.0, -5.0, 0.0], [88.0, 88.7, 100.0, -1e30],
                         [-1000.0, -1001.0, -2000.0, -1e30], [3e38, 3e38, 0.0, -3e38]], np.float32)


@claim_measure("softmax-002")
def _exp89(part):
    """001:26: e^89 exceeds the float32 maximum, so x >= 89 gives inf and the naive softmax NaN."""
    with np.errstate(over="ignore"):
        e89 = np.exp(np.float32(89.0))
    nan_rows = int(np.isnan(_naive_f32(HOSTILE_ROWS[:3])).any(axis=-1).sum())
    return checked(bool(np.isinf(e89)) and nan_rows == 3,
                   f"expf(89) = {e89} in float32; naive softmax: NaN in {nan_rows} of 3 rows with x >= 89 (NumPy)")


@claim_measure("softmax-003")
def _safe_fixes(part):
    """001:31: subtracting the row max removes the overflow; what underflows to 0 is harmless (the row
    still sums to 1 and its largest entry is exact)."""
    y = _safe_f32(HOSTILE_ROWS)
    ok = bool(np.isfinite(y).all() and np.allclose(y.sum(-1), 1, atol=1e-6) and (y >= 0).all())
    zeros = int((y == 0).sum())
    return checked(ok, f"safe softmax of {len(y)} hostile rows: all finite, each sums to 1; "
                       f"{zeros} entries underflow to 0 (NumPy float32)")


@claim_measure("softmax-028")
def _combine_never_overflows(part, n: int = 200_000, seed: int = 0):
    """001:365: combine_stats computes expf(a.m - out.m) with out.m = max(a.m, b.m), so the argument
    is <= 0 and the result <= 1: (m, d) pairs merged over hostile maxima never overflow. Two -inf
    maxima (an all -inf row) give -inf - -inf = NaN, which is not an overflow but is shown."""
    rng = np.random.default_rng(seed)
    pick = np.array([-3e38, -1e4, -89.0, 0.0, 89.0, 1e4, 3e38], np.float32)
    am = np.where(rng.random(n) < 0.5, rng.choice(pick, n), rng.standard_normal(n) * 1e3).astype(np.float32)
    bm = np.where(rng.random(n) < 0.5, rng.choice(pick, n), rng.standard_normal(n) * 1e3).astype(np.float32)
    ad, bd = rng.random(n).astype(np.float32) * 4096, rng.random(n).astype(np.float32) * 4096
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.maximum(am, bm)
        d = ad * np.exp(am - m) + bd * np.exp(bm - m)
        both_inf = np.exp(np.float32(-np.inf) - np.float32(-np.inf))
    return checked(bool(np.isfinite(d).all() and (d <= ad + bd + 1e-3 * (ad + bd)).all()),
                   f"{n} merges of hostile (m, d) pairs: no inf (NumPy float32); two -inf maxima give {both_inf}")


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
    facts = facts_of(part)
    fc = results.pick(part, "05_online_vec4", "frac_copy", case="1x151936:float32")
    return (f"The logits row runs on 1 of the {facts['sms']} SMs of the {facts['device']}: step 05 reaches "
            f"{_fmt(fc, '.3f')} of the copy roof there; step 10 splits the row over a cluster of blocks: "
            f"{results.compare_text(part, '10_cluster', '05_online_vec4', '1x151936:float32')} "
            f"({results.source(part)}).") if facts else "No device facts for this record."
