"""GEMV (lab 04): the sentences and pairs tables under the lab's tables, one call a cell."""
from __future__ import annotations

import pandas as pd

from ..core import results
from .prefill import BATCH_TOKENS
from .reference import CASES, KV, QO, TARGET_SHAPES, UP, case_key
from .report import GEMV, first_win, time_us
from .steps import BEST, FLOOR, LOGITS

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
                        ).set_index("switch").rename_axis(results.source(df))


def floor_text(d) -> str:
    """One device: step 27 against the read-only floor and cuBLAS, and any step beating the floor."""
    of_floor = [results.ratio(d, "27_fp16_rows", FLOOR, c) for c in CASES16]
    vs_cub = [results.ratio(d, "27_fp16_rows", CUB, c) for c in CASES16]
    beats = [f"`{n}` at `{c}`" for c in CASES16 for n in dict.fromkeys(d.loc[d["kind"] == "variant", "name"])
             if results.ratio_band(d, FLOOR, n, c).hi < 1]
    if of_floor[0] != of_floor[0]:
        return "Not measured or recorded yet."
    return (f"Over the five decode shapes of the targets, step 27 runs at **{min(of_floor):.2f}–{max(of_floor):.2f}** "
            f"of the read-only floor's speed and at **{min(vs_cub):.2f}–{max(vs_cub):.2f}×** cuBLAS "
            f"({results.source(d)}). " + (f"Faster than the floor beyond the noise: {', '.join(beats)}. There the "
            "floor is no floor: a better reader would move those bytes faster (the device record then raises its "
            "read roof to the fastest row, so no fraction exceeds 1)." if beats else
            "No step beats the floor beyond the noise; where a step is close to 1.0, only fewer bytes can make it faster."))


def default_said(part, w8) -> str:
    """Whether the int4 and W8A16 defaults (gemv.BEST) beat the step they follow beyond the noise, and at how
    many shapes: a default that is within noise somewhere is a choice there, not a measured best."""
    said = []
    for d, path, before in ((part, "int4", "28_int4_mma"), (w8, "w8a16", "29_int8_w8a16")):
        step = BEST[path]
        got = [m for m in (results.ratio_band(d, step, before, c) for c in results.cases(d, step)) if m.ok]
        if not got:
            said.append(f"`{step}` ({path}): not in this record yet")
            continue
        won = sum(m.value > 1 and not results.within_noise(m) for m in got)
        said.append(f"`{step}` ({path}) is faster than `{before}` beyond the noise at **{won} of {len(got)}** shapes")
    return ("`gemv.BEST` makes these the defaults that lab 08's token step runs: " + "; ".join(said)
            + f" ({results.source(part)}). Where a default is within noise of the step before it, it is a choice "
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
    rv, best = roof_values(d), results.fastest(d, QO16) or BEST["float16"]
    t, tf = time_us(d, best, QO16), time_us(d, FLOOR, QO16)
    return ("Not measured or recorded yet." if t != t or not rv else
            f"An empty kernel takes {rv['launch_us']:.1f} µs, {100 * rv['launch_us'] / t:.0f}% of step {best[:2]}'s "
            f"(the fastest there) {t:.1f} µs at 4096×4096; at the read roof the 32 MiB of weights alone would take "
            f"{2 * 4096 * 4096 / rv['read_gbps'] / 1e3:.1f} µs, and the read-only kernel of those bytes takes "
            f"{tf:.1f} µs ({results.source(d)}).")


def say_as_written(tab, aw, claims_tab) -> None:
    """as_written's table read out: where the course's step is faster than the report's kernel as written
    beyond the noise, within it, or slower (the device on screen); the report's own Orin times, comparable
    only on an Orin; and the report's pairs on its own kernels (as_written_claims) by verdict."""
    from ..core.device import facts, is_live
    from ..core.frame import short_device
    import pandas as pd
    d = results.one_source(pd.concat([f for f in aw if f is not None and len(f)], ignore_index=True))
    if tab.empty or d is None or d.empty or tab["noise rule"].eq("not recorded here yet").all():
        results.say("Not measured here and not recorded yet: a GPU (or `make bench`) times the report's kernels.")
        return
    by = {w: [f"`{a}` → `{c}`" for a, c in zip(tab["as written"], tab["the course's"])
              if tab.loc[tab["as written"] == a, "noise rule"].iloc[0] == w] for w in tab["noise rule"].unique()}
    quiet = ("within noise", "not recorded here yet")       # counted; the pairs outside the noise are named
    parts = [f"{w} at {len(v)} of {len(tab)}" + ("" if w in quiet else f" ({', '.join(v)})") for w, v in by.items()]
    results.say("The report's kernels as written against the course's (the column `the change` says what lies "
                "between them), at the report's shapes: "
                + "; ".join(parts) + f" ({results.source(d)}). "
                + ("" if is_live() else "The checks above ran the NumPy reference only (no GPU here); "
                   "`tests/test_gemv.py` runs the kernels as written on the CPU (core.emulate) against it."))
    f = facts(d)
    seed = {"38_int8_char4_scale4": SEED_MS["int8"], "39_fp16_f32out_v2": SEED_MS["fp16 in, fp32 out"]}
    if f.get("arch") == "sm_87":          # the report's GPU: its times are comparable, at 4096 x 4096
        said = [f"`{s}` {time_us(d, s, case_key((4096, 4096), dt)) / 1e3:.3f} ms here "
                f"against the report's {ms:.3f} ms" for s, (_, dt, ms) in seed.items()]
        results.say("This GPU is an Orin (sm_87), the report's kind: " + "; ".join(said) + f" ({results.source(d)}). "
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
