"""GEMV's report: models on paper, the targets, the tables and readers behind the lab's sentences, GEMV."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..core.bench import time_fn, waves as _waves
from ..core.build import ptx
from ..core.check import variants
from ..core.device import ORIN_PEAK_GBPS, info, is_live
from ..core.family import FLOOR_TARGET, Family, Target
from ..core.results import (band, claims, devices, fastest, one_source, pick, ratio, ratio_band, select, source,
                            targets as judge, within_noise)
from .prefill import BATCHED, CONVERT
from .reference import (CASES, CHECK_CASES, FAMILY, GROUP, INT32_MAX, NAME, RECORD_CASES, SHAPES,
                        TARGET_SHAPES, VOCAB, bytes_moved, case_key, make_input, reference, tolerance)
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
