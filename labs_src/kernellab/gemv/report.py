"""GEMV's report: models on paper, the targets, the tables and readers behind the lab's sentences, GEMV, and the
sentences and pairs tables themselves (one call a cell)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..core import results
from ..core.bench import time_fn, waves as _waves
from ..core.build import ptx
from ..core.check import variants
from ..core.device import ORIN_PEAK_GBPS, info, is_live
from ..core.family import FLOOR_TARGET, Family, Target
from ..core.results import (band, claims, devices, fastest, one_source, pick, ratio, ratio_band, select, source,
                            targets as judge, within_noise)
from .prefill import BATCH_TOKENS, BATCHED, CONVERT
from .reference import (CASES, CHECK_CASES, FAMILY, GROUP, INT32_MAX, KV, NAME, QO, RECORD_CASES, SHAPES,
                        TARGET_SHAPES, UP, VOCAB, bytes_moved, case_key, make_input, reference, tolerance)
from .steps import BASELINES, BEST, COMPUTE_ONLY, FAST, FLOOR, LOGITS, VARIANTS


def int32_offsets(shapes=None):
    """Where the last row's offset (K-1) * M leaves int32, as elements and as fp16 / fp32 bytes."""
    shapes = shapes or {**SHAPES, "vocab_152064x14336 (wider model)": (152064, 14336)}
    rows = []
    for nm, (K, M) in shapes.items():
        last = (K - 1) * M
        rows.append({"shape": nm, "K": K, "M": M, "(K-1)*M": last, "elements fit int32": last <= INT32_MAX,
                     "fp16 bytes fit int32": 2 * last <= INT32_MAX, "fp32 bytes fit int32": 4 * last <= INT32_MAX,
                     "int32 wraps to": int(np.array([last]).astype(np.int64).astype(np.int32)[0])})
    return pd.DataFrame(rows)


def check_variants(family=None, names=None, cases=None) -> None:
    """check.variants (the family's M-scaled tolerance applies there); the main GEMV family by default."""
    variants(family or GEMV, names, cases)


def waves(K, rows_per_block, threads, sms, blocks_per_sm) -> dict:
    """How a GEMV grid fills the GPU (bench.waves), and the warps each SM gets on average."""
    blocks = -(-K // rows_per_block)
    return {**_waves(blocks, sms, blocks_per_sm), "warps per SM (avg)": round(blocks * threads / 32 / sms, 1)}


def orin_model(shapes=None, frac=0.85):
    """Jetson Orin on paper (a MODEL, not a measurement): unique bytes / (frac x roof) per path."""
    shapes = shapes or SHAPES
    rows = []
    for nm, (K, M) in shapes.items():
        b16 = 2 * K * M + 2 * M + 2 * K
        b8 = K * M + 4 * K * -(-M // GROUP) + 4 * M + 4 * K
        b4 = K * -(-M // 2) + 3 * K * -(-M // GROUP) + 2 * M + 4 * K
        for board, bw in ORIN_PEAK_GBPS.items():
            rows.append({"shape": nm, "board": f"Orin {board}", "roof GB/s": bw, "rows per SM (16 SMs)": round(K / 16, 1),
                         "fp16 µs (model)": b16 / (frac * bw) / 1e3, "int8 µs (model)": b8 / (frac * bw) / 1e3,
                         "int4 µs (model)": b4 / (frac * bw) / 1e3})
    return pd.DataFrame(rows)


# ---- the targets, read from the results on screen ----------------------------------------

def time_us(df, name, case) -> float:
    """The median µs of one row of a results frame (NaN when absent)."""
    return pick(df, name, "median_us", case=case)


def _vs(slow_case, fast_case=None, slow=None, fast=None, floor=False):
    """A target's measure: time(slow) / time(fast), each the named row or our fastest; floor=True: FLOOR as fast."""
    def m(df):
        fc = fast_case or slow_case
        f = FLOOR if floor else fast or fastest(df, fc)
        sl = slow or fastest(df, slow_case)
        return ratio_band(df, f, sl, fc, slow_case) if f and sl else float("nan")
    return m


def _frac_read(case, floor=False):
    def m(df):
        name = FLOOR if floor else fastest(df, case)
        return pick(df, name, "frac_read", case=case) if name else float("nan")
    return m


def _targets():
    k = case_key
    cub = "cuBLAS (cupy.matmul)"
    out = [Target(f"fastest fp16 vs cuBLAS, {s[0]}x{s[1]}", _vs(k(s, "float16"), slow=cub),
                  1.3 if s == (4096, 4096) else 1.0, floor=_vs(k(s, "float16"), slow=cub, floor=True))
           for s in TARGET_SHAPES]
    out += [Target(f"fastest fp16, fraction of the read roof, {s[0]}x{s[1]}", _frac_read(k(s, "float16")), 0.9,
                   floor=_frac_read(k(s, "float16"), floor=True)) for s in TARGET_SHAPES[1:]]
    out += [Target(f"{path} vs our fastest fp16, {s[0]}x{s[1]}", _vs(k(s, "float16"), k(s, path)), need,
                   floor=_vs(k(s, "float16"), k(s, path), floor=True))
            for path, need in (("int8", 1.6), ("w8a16", 1.6), ("int4", 2.5))
            for s, _ in CASES[path] if (s, "float16") in CASES["float16"]]
    out += [Target(f"fastest {path}, fraction of its read-only floor, {s[0]}x{s[1]}", _vs(k(s, path), slow=FLOOR),
                   FLOOR_TARGET) for path in ("int4", "w8a16") for s, _ in CASES[path]]     # issue 38: every recorded shape
    out.append(Target("fastest int4 vs our fastest fp16, 151936x4096 (the logits head)",
                      _vs(k(VOCAB, "float16"), k(VOCAB, "int4")), 3.0, floor=_vs(k(VOCAB, "float16"), k(VOCAB, "int4"), floor=True)))  # noqa: E501
    c = k((4096, 4096), "float32")
    out.append(Target("fp32 GEMV vs cuBLAS sgemv, 4096x4096", _vs(c, slow=cub), 1.0, floor=_vs(c, slow=cub, floor=True)))
    return tuple(out)


def targets(df):
    """The lab's targets (GEMV.targets) judged by the one rule, with the figure at the floor."""
    return judge(GEMV.targets, df)


# ---- small readers of a results frame, for the lab's sentences ----------------------------------

def ladder(df, names):
    """Each step's speed-up over the one before (and the last over the first), per case."""
    if df is None or df.empty:
        return pd.DataFrame()
    print(f"Speed-ups, time(before) / time(after): {source(df)}")
    cases = list(dict.fromkeys(df["case"]))
    pairs = [*zip(names, names[1:]), (names[0], names[-1])]
    return pd.DataFrame({f"{b} vs {a}": [ratio(df, b, a, c) for c in cases] for a, b in pairs}, index=cases).round(2)


def first_win(df, challenger: str, incumbent: str, cases) -> tuple:
    """The first case where `challenger` beats `incumbent` beyond the noise, with the ratio, or (None, nan)."""
    for c in cases:
        m = ratio_band(df, challenger, incumbent, c)
        if m.ok and m.value > 1 and not within_noise(m):
            return c, m.value
    return None, float("nan")


def loop_instructions(step: str, arch: str = "sm_90") -> dict:
    """PTX instructions per weight byte in a fast-template step's main loop (a guide, not a SASS count)."""
    lines = ptx(FAMILY, step, arch)
    marks = [i for i, l in enumerate(lines) if re.match(r"\$L__BB\d+_\d+:", l)] + [len(lines)]
    body = max((lines[a:b] for a, b in zip(marks, marks[1:])), key=len)
    real = [l for l in body if l and not l.startswith(("$", "//", ".loc", "{", "}", "mov.", "@"))
            and not l.startswith(".reg")]
    _, vec, R, U = FAST[step]
    wbytes = 16 * R * U
    return {"step": step, "instructions per trip": len(real), "weight bytes per trip": wbytes,
            "instructions per weight byte": round(len(real) / wbytes, 2) if wbytes else float("nan")}


def warm_vs_flushed(name, cases):
    """Live only: one variant's time with L2 flushed and warm (no flush), per case."""
    if not is_live():
        print(f"SKIPPED (compile-only): on a GPU this times {name} flushed and warm at {[s for s, _ in cases]}.")
        return pd.DataFrame()
    import cupy
    rows = []
    for shape, dt in cases:
        args = [cupy.asarray(a) for a in GEMV.make_input(shape, dt)]
        v = GEMV.variants[name]
        out = v.alloc_out(*args)
        f = lambda: v(*args, out=out)   # noqa: E731
        fl, wm = time_fn(f).median_us, time_fn(f, flush=False).median_us
        rows.append({"case": case_key(shape, dt), "weight MiB": args[0].nbytes / 2 ** 20,
                     "weight fits in L2": args[0].nbytes <= (info()["l2_bytes"] or 0),
                     "flushed µs": fl, "warm µs": wm, "flushed / warm": fl / wm})
    return pd.DataFrame(rows).round(2)


# ---- the quantised paths against fp16, and their limits: tables of the device on screen ----------------
INT4_TILED = ("28_int4_mma", "35_int4_pipelined", "36_int4_tiles")
W8A16_STEPS = ("29_int8_w8a16", "37_w8a16_tiles")


def _on(part):
    """Another frame cut to the device of `part`."""
    return (lambda d, dev=part["device"].iloc[0]: select(d, device=dev)) if "device" in part else (lambda d: d)


def _fastest16(f16, k, m) -> float:
    """The µs of our fastest fp16 step at K x M, read from the data."""
    c = case_key((k, m), "float16")
    return time_us(f16, fastest(f16, c), c)


def int4_table(f16, i8, i4):
    """Per int4 shape: int8, int4 steps and the floor as time(fastest fp16) / theirs; tiled steps of their floor."""
    b8, rows = BEST["int8"], []
    for part in devices(i4)[:1]:         # the device on screen; every record side by side: results.device_table
        on = _on(part)
        for (k, m), _ in CASES["int4"]:
            t16, c8, c4 = _fastest16(on(f16), k, m), case_key((k, m), "int8"), case_key((k, m), "int4")
            rows.append({"shape": f"{k}x{m}", f"int8 ({b8[:2]}) vs fastest fp16": t16 / time_us(on(i8), b8, c8),
                         **{f"int4 ({s[:2]}) vs fastest fp16": t16 / time_us(part, s, c4) for s in ("26_int4_awq", *INT4_TILED)},
                         "int4 floor vs fastest fp16": t16 / time_us(part, FLOOR, c4),
                         **{f"int4 ({s[:2]}) fraction of its floor": ratio(part, s, FLOOR, c4) for s in INT4_TILED}})
    print(source(i4))
    return pd.DataFrame(rows).round(2)


def w8a16_table(f16, i8, w8):
    """Per W8A16 shape: steps 29 / 37 against fastest fp16 and int8, the floor, and fractions of it."""
    b8, b29, rows = BEST["int8"], BEST["w8a16"], []
    for part in devices(w8)[:1]:
        on = _on(part)
        for (k, m), _ in CASES["w8a16"]:
            c8, cw, t16 = case_key((k, m), "int8"), case_key((k, m), "w8a16"), _fastest16(on(f16), k, m)
            rows.append({"shape": f"{k}x{m}",
                         **{f"W8A16 ({s[:2]}) vs fastest fp16": t16 / time_us(part, s, cw) for s in W8A16_STEPS},
                         f"W8A16 ({b29[:2]}) vs int8 with fp32 x ({b8[:2]})": time_us(on(i8), b8, c8) / time_us(part, b29, cw),
                         "int8 floor vs fastest fp16": t16 / time_us(part, FLOOR, cw),
                         **{f"W8A16 ({s[:2]}) fraction of its floor": ratio(part, s, FLOOR, cw) for s in W8A16_STEPS}})
    print(source(w8))
    return pd.DataFrame(rows).round(2)


def limits_table(i8, i4, w8):
    """Per shape of the quantised defaults: kernel, floor (bytes alone), compute only (instructions alone)."""
    rows = []
    for part in devices(w8)[:1]:
        on = _on(part)
        for df, path in ((i8, "int8"), (i4, "int4"), (w8, "w8a16")):
            d, step = on(df), BEST[path]
            for (k, m), _ in CASES[path]:
                c = case_key((k, m), path)
                t, fl, co = (time_us(d, n, c) for n in (step, FLOOR, COMPUTE_ONLY))
                co = co if t == t else float("nan")     # a record older than the step: its compute-only build is another's
                cf = ratio_band(d, FLOOR, COMPUTE_ONLY, c)   # time(compute only) / time(floor)
                rows.append({"device": source(part), "step": step, "shape": f"{k}x{m}", "kernel µs": t,
                             "floor µs (bytes only)": fl, "compute only µs": co, "compute only / floor": co / fl,
                             "instructions vs bytes": "n/a" if co != co else "within noise" if within_noise(cf)
                             else "longer" if cf.value > 1 else "shorter", "kernel / max(both)": t / max(fl, co)})
    print(source(w8))
    return pd.DataFrame(rows).round(2)


GEMV = Family(
    name=NAME, kernels=FAMILY, variants=VARIANTS, reference=reference, make_input=make_input,
    bytes_moved=bytes_moved, check_cases=CHECK_CASES, baselines=BASELINES, shapes=SHAPES, default=BEST,
    case_key=case_key, record_cases=RECORD_CASES, tolerance=tolerance, roof="read", targets=_targets(),
    about="lab 04: GEMV, the matmul report's kernels before/after and beyond")


# ---- the report's kernels as it writes them, each beside the course's own (issue 34, item 5) -----
# (the report's kernel, where seed 002 writes it (lines), the step as written, the course's step, the
# change from the first to the second, the family (name), the data path, the shape: the report's own)
AS_WRITTEN = (
    ("matmul_kernel_cu_fp32<128,1>, before", "66-72", "30_f32_sdata_float4", "03_f32_float4",
     "a register sum (no sdata[], one __syncthreads fewer)", "gemv", "float32", (4096, 4096)),
    ("matmul_kernel_cu_fp32int8<128,1>, before", "76-85", "31_int8_sdata", "05_int8_scalar",
     "a register sum (no sdata[], one __syncthreads fewer)", "gemv", "int8", (4096, 4096)),
    ("matmul_kernel_cu_fp32int8<128,1>, after", "209-217", "38_int8_char4_scale4", "06_int8_char4",
     "one scale lookup per 4 elements (the report looks up 4)", "gemv", "int8", (4096, 4096)),
    ("gemv_pure_fp16_kernel_v2<32,8>, after", "107-113, 222-238", "33_fp16_v2_ldg", "10_fp16_v2",
     "a load of its own per accumulator: 4 loads in flight per lane, not 1", "gemv", "float16", (4096, 4096)),
    ("gemv_fp16_input_fp16_weight_fp32_output<8,4>, after", "124-131, 247-250", "39_fp16_f32out_v2",
     "12_fp16_f32out_ilp", "a load of its own per accumulator: 4 loads in flight per lane, not 1", "gemv_logits",
     "fp16_f32out", (4096, 4096)),
    ("batched_matmul_fp16_weight_kernel<256>, before", "92-97", "40_batched_f16w_sdata", "14_batched_f16w_half2",
     "__ldg, fmaf and a register sum (no sdata[])", "gemv_batched", "f32_fp16w", (128, 4096, 4096)),
    ("batched_gemm_pure_fp16_kernel<256>, before", "114-120", "41_batched_fp16_sdata", "16_batched_fp16_half2",
     "__ldg, fmaf and a register sum (no sdata[])", "gemv_batched", "float16", (128, 4096, 4096)),
    ("fp32_to_fp16_kernel, before", "99-105", "42_f32_to_f16_x2_plain", "18_f32_to_f16_x2", "__ldg on the input",
     "gemv_convert", "f32_to_f16", (512 * 12288,)),
    ("fp16_to_fp32_kernel, before", "99-105", "43_f16_to_f32_x2_plain", "20_f16_to_f32_x2", "__ldg on the input",
     "gemv_convert", "f16_to_f32", (512 * 12288,)),
)
REPORT_OWN = ("04_f32_ldg", "11_fp16_f32out_half2", "32_fp16_v2_plain", "34_batched_f32_sdata", "13_batched_f32",
              "15_batched_f16w_half2x2", "17_batched_fp16_float4", "19_f32_to_f16_x4", "21_f16_to_f32_x4")
# ^ the report's other kernels, which the course's ladder keeps as the report writes them (their Why comments)
AS_WRITTEN_PTX = {   # the instruction each change shows in the PTX (sm_87, the report's GPU)
    "a register sum": r"bar\.sync", "one scale lookup": r"ld\.global\.nc\.f32", "a load of its own": r"ld\.global\.nc\.v4",
    "__ldg, fmaf": r"ld\.global\.nc", "__ldg on": r"ld\.global\.nc"}


def as_written_cases(family_name) -> list:
    """The (shape, data path) cases of AS_WRITTEN's rows of one family: what bench.compare times for them."""
    return list(dict.fromkeys((s, dt) for *_, fam, dt, s in AS_WRITTEN if fam == family_name))


def as_written_names(family_name) -> list:
    """The steps of AS_WRITTEN's rows of one family, each as written then the course's, and the report's other
    kernels in that family (REPORT_OWN), so the frame holds each of the report's pairs."""
    fam = {f.name: f for f in (GEMV, LOGITS, BATCHED, CONVERT)}[family_name]
    rows = [n for _, _, w, c, _, f, _, _ in AS_WRITTEN if f == family_name for n in (w, c)]
    return list(dict.fromkeys(rows + [n for n in REPORT_OWN if n in fam.variants]))


def as_written_ptx(arch: str = "sm_87"):
    """Each row's change in the PTX (the report's GPU by default): the instruction it touches, counted in
    the step as written and in the course's (a count, no GPU needed)."""
    rows = []
    for _, _, w, c, change, *_ in AS_WRITTEN:
        pat = next(v for k, v in AS_WRITTEN_PTX.items() if change.startswith(k))
        rows.append({"as written": w, "the course's": c, "the change": change, f"PTX ({arch}) lines": pat,
                     "count as written": len(ptx(FAMILY, w, arch, grep=pat)),
                     "count in the course's": len(ptx(FAMILY, c, arch, grep=pat))})
    return pd.DataFrame(rows)


def as_written(frames):
    """The report's kernels as written against the course's, at the report's own shapes, from the frames on
    screen (the device that speaks first: the live GPU, or the reference record): each one's time and the
    course's, time(as written) / time(course's) and the noise rule's word (p10-p90 bands apart or not)."""
    d = one_source(pd.concat([f for f in frames if f is not None and len(f)], ignore_index=True))
    rows = []
    for kern, lines, w, c, change, fam, dt, shape in AS_WRITTEN:
        case = case_key(shape, dt)
        m = ratio_band(d, c, w, case) if d is not None else None
        word = ("not recorded here yet" if m is None or not m.ok else "within noise" if within_noise(m)
                else "course's faster" if m.value > 1 else "course's slower")
        rows.append({"the report's kernel": kern, "seed 002, lines": lines, "as written": w, "the course's": c,
                     "case": case, "as written µs": band(d, w, case).value if d is not None else float("nan"),
                     "course's µs": band(d, c, case).value if d is not None else float("nan"),
                     "as written / course's": m.value if m is not None else float("nan"), "noise rule": word})
    out = pd.DataFrame(rows).round(2)
    out.attrs["device"] = d["device"].iloc[0] if d is not None and len(d) and "device" in d else None
    return out


def check_as_written() -> None:
    """Each AS_WRITTEN step and the course's beside it, checked against the float64 reference on its
    family's awkward cases (check.variants: compile-only, it says what it could not run)."""
    for fam in (GEMV, LOGITS, BATCHED, CONVERT):
        variants(fam, as_written_names(fam.name))


def as_written_claims(frames):
    """The lab's claims rows (results.claims: docs/claims.csv judged by the one rule, from the same frames)
    that time the report's before against its after, both as the report writes them, one of them a step of
    AS_WRITTEN: the report's pairs judged on its own kernels."""
    tab = claims("04_gemv", list(frames), [GEMV, LOGITS, BATCHED, CONVERT])
    steps = {w for _, _, w, *_ in AS_WRITTEN} | set(REPORT_OWN)
    pair = [h.split(" at ")[0].split(" vs ") for h in tab["how"]] if len(tab) else []
    keep = [len(p) == 2 and set(p) <= steps and bool(set(p) - set(REPORT_OWN)) for p in pair]
    return tab[keep].reset_index(drop=True) if len(tab) else tab


QO32, QO8, QO16 = case_key(QO, "float32"), case_key(QO, "int8"), case_key(QO, "float16")
KV16, UP16 = case_key(KV, "float16"), case_key(UP, "float16")
CASES16 = [case_key(s, "float16") for s in TARGET_SHAPES]      # the five decode shapes of the targets
SEED_MS = {"fp16 in, fp32 out": (LOGITS, "fp16_f32out", 0.288), "fp32": (GEMV, "float32", 0.576),
           "int8": (GEMV, "int8", 0.362)}                       # the report's own Orin times at 4096 x 4096
CUB = "cuBLAS (cupy.matmul)"
# results.pairs(frame, *PAIRS[...]): (rows, title); a row's last column is the report's own figure, where it gives one
PAIRS = {
    "f32": ([("the report's pair (30 → 04)", "04_f32_ldg", "30_f32_sdata_float4", QO32, "1.60× on Orin"),
             ("the course's first step (01 → 04)", "04_f32_ldg", "01_f32_sdata", QO32, ""),
             ("04 against cuBLAS's sgemv", "04_f32_ldg", CUB, QO32, "")], "fp32 at 4096×4096"),
    "int8": ([("the report's pair as written (31 → 38)", "38_int8_char4_scale4", "31_int8_sdata", QO8, "1.08× on an Orin"),
              ("one scale lookup per 4 elements (38 → 06)", "06_int8_char4", "38_int8_char4_scale4", QO8, ""),
              ("the course's five changes (05 → 06)", "06_int8_char4", "05_int8_scalar", QO8, "")], "int8 at 4096×4096"),
    "fp16_v2": ([("the report's v2 pair as written (32 → 33)", "33_fp16_v2_ldg", "32_fp16_v2_plain", QO16,
                  "1.00× on an Orin"),
                 ("the course's v1 → v2 (09 → 10)", "10_fp16_v2", "09_fp16_half2", QO16, ""),
                 ("the same, the short kv projection", "10_fp16_v2", "09_fp16_half2", KV16, "")], "fp16 v1 → v2"),
    "evict_first": ([("the evict-first policy, clean L2", "22_fp16_fast_stream", "22_fp16_fast", c) for c in (UP16, QO16)],
                    "evict-first against plain __ldg"),
}
# gemv.switches(frame, key): (the switch, the challenger, the step it replaces, the cases in order, the report's switch)
HGEMM = "cuBLAS Hgemm route (f32->f16, Hgemm, f16->f32)"
SWITCHES = {
    "f16w": [("block per row (08) over warp per row (07), K = 4096, by M", "08_f32_fp16w_block", "07_f32_fp16w_warp",
              [case_key(s, d) for s, d in CASES["f32_fp16w"]], "M = 2048")],
    "fp16": [(f"cuBLAS over step 17, {k}×{m}, by tokens", CUB, "17_batched_fp16_float4",
              [case_key((n, k, m), "float16") for n in BATCH_TOKENS], "8 tokens") for k, m in ((4096, 4096), (12288, 4096))],
    "f32_fp16w": [("the Hgemm route over step 15, 4096×4096, by tokens", HGEMM, "15_batched_f16w_half2x2",
                   [case_key((n, 4096, 4096), "f32_fp16w") for n in BATCH_TOKENS], "8 tokens")],
}


def switches(df, key):
    """Where each challenger first beats the step it replaces beyond the noise (first_win), beside the report's switch."""
    rows = [(what, *first_win(df, a, b, cases), said) for what, a, b, cases, said in SWITCHES[key]]
    return pd.DataFrame([{"switch": what, "first faster beyond the noise at": at or ("never" if len(df) else "not recorded yet"),
                          "time replaced / new": round(r, 2), "the report switches at": said} for what, at, r, said in rows]
                        ).set_index("switch").rename_axis(source(df))


def floor_text(d) -> str:
    """One device: step 27 against the read-only floor and cuBLAS, and any step beating the floor."""
    of_floor = [ratio(d, "27_fp16_rows", FLOOR, c) for c in CASES16]
    vs_cub = [ratio(d, "27_fp16_rows", CUB, c) for c in CASES16]
    beats = [f"`{n}` at `{c}`" for c in CASES16 for n in dict.fromkeys(d.loc[d["kind"] == "variant", "name"])
             if ratio_band(d, FLOOR, n, c).hi < 1]
    if of_floor[0] != of_floor[0]:
        return "Not measured or recorded yet."
    return (f"Over the five decode shapes of the targets, step 27 runs at **{min(of_floor):.2f}–{max(of_floor):.2f}** "
            f"of the read-only floor's speed and at **{min(vs_cub):.2f}–{max(vs_cub):.2f}×** cuBLAS "
            f"({source(d)}). " + (f"Faster than the floor beyond the noise: {', '.join(beats)}. There the "
            "floor is no floor: a better reader would move those bytes faster (the device record then raises its "
            "read roof to the fastest row, so no fraction exceeds 1)." if beats else
            "No step beats the floor beyond the noise; where a step is close to 1.0, only fewer bytes can make it faster."))


def default_said(part, w8) -> str:
    """Whether the int4 and W8A16 defaults (gemv.BEST) beat the step they follow beyond the noise, and at how
    many shapes: a default that is within noise somewhere is a choice there, not a measured best."""
    said = []
    for d, path, before in ((part, "int4", "28_int4_mma"), (w8, "w8a16", "29_int8_w8a16")):
        step = BEST[path]
        got = [m for m in (ratio_band(d, step, before, c) for c in results.cases(d, step)) if m.ok]
        if not got:
            said.append(f"`{step}` ({path}): not in this record yet")
            continue
        won = sum(m.value > 1 and not within_noise(m) for m in got)
        said.append(f"`{step}` ({path}) is faster than `{before}` beyond the noise at **{won} of {len(got)}** shapes")
    return ("`gemv.BEST` makes these the defaults that lab 08's token step runs: " + "; ".join(said)
            + f" ({source(part)}). Where a default is within noise of the step before it, it is a choice "
            "(a layout an engine makes once, at load time), not a measured gain at that shape.")


def say_seed_times() -> None:
    """The bandwidth the report's Orin times imply."""
    implied = {k: f.bytes_moved(*f.make_input((4096, 4096), dt)) / ms / 1e6 for k, (f, dt, ms) in SEED_MS.items()}
    results.say("The report's Orin times imply " + ", ".join(f"**{v:.0f} GB/s** for {k}" for k, v in implied.items())
                + ". The fp16 and fp32 kernels moved their bytes at the same rate, as memory-bound kernels do; the int8 "
                f"kernel moved {implied['int8'] / implied['fp32']:.0%} of that: it was not bound by its bytes on the Orin.")


def launch_share(d) -> str:
    """An empty kernel's share of the fastest fp16 step at 4096 x 4096, beside the read roof's and floor's times."""
    from ..core.bench import roof_values
    rv, best = roof_values(d), fastest(d, QO16) or BEST["float16"]
    t, tf = time_us(d, best, QO16), time_us(d, FLOOR, QO16)
    return ("Not measured or recorded yet." if t != t or not rv else
            f"An empty kernel takes {rv['launch_us']:.1f} µs, {100 * rv['launch_us'] / t:.0f}% of step {best[:2]}'s "
            f"(the fastest there) {t:.1f} µs at 4096×4096; at the read roof the 32 MiB of weights alone would take "
            f"{2 * 4096 * 4096 / rv['read_gbps'] / 1e3:.1f} µs, and the read-only kernel of those bytes takes "
            f"{tf:.1f} µs ({source(d)}).")


def say_as_written(tab, aw, claims_tab) -> None:
    """as_written's table read out: where the course's step is faster than the report's kernel as written
    beyond the noise, within it, or slower (the device on screen); the report's own Orin times, comparable
    only on an Orin; and the report's pairs on its own kernels (as_written_claims) by verdict."""
    from ..core.device import facts, is_live
    from ..core.frame import short_device
    import pandas as pd
    d = one_source(pd.concat([f for f in aw if f is not None and len(f)], ignore_index=True))
    if tab.empty or d is None or d.empty or tab["noise rule"].eq("not recorded here yet").all():
        results.say("Not measured here and not recorded yet: a GPU (or `make bench`) times the report's kernels.")
        return
    by = {w: [f"`{a}` → `{c}`" for a, c in zip(tab["as written"], tab["the course's"])
              if tab.loc[tab["as written"] == a, "noise rule"].iloc[0] == w] for w in tab["noise rule"].unique()}
    quiet = ("within noise", "not recorded here yet")       # counted; the pairs outside the noise are named
    parts = [f"{w} at {len(v)} of {len(tab)}" + ("" if w in quiet else f" ({', '.join(v)})") for w, v in by.items()]
    results.say("The report's kernels as written against the course's (the column `the change` says what lies "
                "between them), at the report's shapes: "
                + "; ".join(parts) + f" ({source(d)}). "
                + ("" if is_live() else "The checks above ran the NumPy reference only (no GPU here); "
                   "`tests/test_gemv.py` runs the kernels as written on the CPU (core.emulate) against it."))
    f = facts(d)
    seed = {"38_int8_char4_scale4": SEED_MS["int8"], "39_fp16_f32out_v2": SEED_MS["fp16 in, fp32 out"]}
    if f.get("arch") == "sm_87":          # the report's GPU: its times are comparable, at 4096 x 4096
        said = [f"`{s}` {time_us(d, s, case_key((4096, 4096), dt)) / 1e3:.3f} ms here "
                f"against the report's {ms:.3f} ms" for s, (_, dt, ms) in seed.items()]
        results.say("This GPU is an Orin (sm_87), the report's kind: " + "; ".join(said) + f" ({source(d)}). "
                    "The report's board moved \"~100 GB/s\" in its own words: set this board's read roof (lab 00) "
                    "beside that before reading the two times as like for like.")
    else:
        results.say("The report's own times of its afters at 4096×4096 ("
                    + ", ".join(f"`{s}` {ms:.3f} ms" for s, (_, _, ms) in seed.items())
                    + f") are **not comparable here**: the report timed them on a Jetson Orin (sm_87, 16 SMs, LPDDR5), "
                    f"and this frame is from {short_device(f.get('device', 'another GPU'))} ({f.get('sms', '?')} SMs, "
                    f"{f.get('arch', '?')}). A time does not carry from one GPU to another; a ratio of two steps timed "
                    "on one GPU is what the claims above judge.")
    ok = claims_tab[claims_tab["verdict"].isin(results.OUTCOMES)] if len(claims_tab) else claims_tab
    counts = ", ".join(f"{k} **{n}**" for k, n in ok["verdict"].value_counts().items()) if len(ok) else ""
    results.say(f"The claims file times {len(claims_tab)} of the report's pairs on its kernels as written: "
                + (f"{len(ok)} judged on this record ({counts})" if len(ok) else "none judged on this record")
                + (f"; {len(claims_tab) - len(ok)} without a verdict here (not in this record, or an end-to-end claim)"
                   if len(claims_tab) > len(ok) else "") + " (the table above). The verdict rule as for every claim: "
                "within noise where the p10–p90 bands overlap, else the measured ratio "
                "against the report's.")
