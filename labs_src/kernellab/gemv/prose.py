"""GEMV (lab 04): the sentences under the lab's tables. Each reads the frames on screen through
results' functions (every number and verdict computed, none typed in); a notebook cell is one call.
`*_said(part)` / `*_text(part)` return one device's Markdown (for results.each_device); `say_*` prints."""
from __future__ import annotations

from ..core import results
from .ablation import unroll_pragma_changes
from .prefill import BATCH_TOKENS
from .reference import KV, QO, TARGET_SHAPES, UP, case_key
from .report import GEMV, first_win, time_us
from .steps import BEST, FLOOR, LOGITS

QO32, QO8, QO16 = case_key(QO, "float32"), case_key(QO, "int8"), case_key(QO, "float16")
KV16, UP16 = case_key(KV, "float16"), case_key(UP, "float16")
CASES16 = [case_key(s, "float16") for s in TARGET_SHAPES]      # the five decode shapes of the targets
SEED_MS = {"fp16 in, fp32 out": (LOGITS, "fp16_f32out", 0.288), "fp32": (GEMV, "float32", 0.576),
           "int8": (GEMV, "int8", 0.362)}                       # the report's own Orin times at 4096 x 4096


def say_int32_offsets(off) -> None:
    """int32_offsets' table read at the logits shape: where `row * M` wraps, and what steps 11, 12, 23 do."""
    lg_row = off.set_index("shape").loc["logits_151936x4096"]
    results.say(f"At 151936×4096 the last row starts at element {lg_row['(K-1)*M']:,}: that "
                f"{'fits' if lg_row['elements fit int32'] else 'does not fit'} in int32 as an element index, and in "
                f"bytes it {'fits' if lg_row['fp16 bytes fit int32'] else 'does not fit'} for fp16 and "
                f"{'fits' if lg_row['fp32 bytes fit int32'] else 'does not fit'} for fp32 weights. So `row * M` does "
                "not wrap at this shape in elements; it wraps for a byte offset of fp32 weights, and for a wider model "
                "(last row). Step 11 keeps the int32 offset and its launcher refuses K × M ≥ 2³¹; steps 12 and 23 use "
                "size_t, and a GPU test runs them at 151936 × 16384 (2.5 G elements) and checks the last rows.")


def say_f32_pair(f32) -> None:
    """The report's fp32 before/after pair at 4096 x 4096, the course's first step, and cuBLAS's sgemv."""
    results.say(f"The report's own pair at 4096×4096, its before (30) and after (04): "
                f"{results.compare_text(f32, '04_f32_ldg', '30_f32_sdata_float4', QO32)} (the report: 1.60× on Orin); "
                f"the course's first step against it: {results.compare_text(f32, '04_f32_ldg', '01_f32_sdata', QO32)}; "
                f"against cuBLAS's sgemv: {results.compare_text(f32, '04_f32_ldg', 'cuBLAS (cupy.matmul)', QO32)} "
                f"({results.source(f32)}).")


def say_int8_pair(i8) -> None:
    """The report's int8 pair as written (31 → 38), its one change to step 06 (38 → 06), the course's 05 → 06."""
    results.say(f"The report's pair at 4096×4096 as it writes it, its `sdata` before (31) and `char4` + `float4` after "
                "with 4 scale lookups per 4 elements (38): "
                f"{results.compare_text(i8, '38_int8_char4_scale4', '31_int8_sdata', QO8)} "
                f"(the report: 1.08× on an Orin); one scale lookup per 4 elements (38 → 06): "
                f"{results.compare_text(i8, '06_int8_char4', '38_int8_char4_scale4', QO8)}; the course's 05 → 06, which "
                f"makes five changes (the ablations below take them apart): "
                f"{results.compare_text(i8, '06_int8_char4', '05_int8_scalar', QO8)} ({results.source(i8)}).")


def say_f16w_switch(fw, fw_cases) -> None:
    """Where the block-per-row fp16-weight kernel first wins beyond the noise, against the report's 2048."""
    win, r = first_win(fw, "08_f32_fp16w_block", "07_f32_fp16w_warp", fw_cases)
    results.say("Not measured or recorded yet: on a GPU this finds the M where the block-per-row kernel starts to win."
                if fw.empty else
                f"The block-per-row kernel first wins beyond the noise at **M = {win.split('x')[1].split(':')[0]}** "
                f"({r:.2f}×), against the report's switch at 2048 ({results.source(fw)})." if win else
                f"The block-per-row kernel never wins beyond the noise up to M = 16384 ({results.source(fw)}).")


def say_fp16_v2(f16) -> None:
    """The report's v2 pair as written (32 → 33), then the course's 09 → 10 at 4096 x 4096 and kv."""
    results.say("The report's v2 pair as it writes it, 32 → 33: "
                f"{results.compare_text(f16, '33_fp16_v2_ldg', '32_fp16_v2_plain', QO16)} "
                f"(the report: 1.00× on an Orin). The course's v1 → v2, 09 → 10: "
                f"{results.compare_text(f16, '10_fp16_v2', '09_fp16_half2', QO16)}, and "
                f"{results.compare_text(f16, '10_fp16_v2', '09_fp16_half2', KV16)}, the short kv projection "
                f"({results.source(f16)}). Step 10 changes two things, the load width and the loads in flight per lane; "
                "the ablation section below times each alone.")


def say_fp16_fast(f16) -> None:
    """Step 22 against step 10, then against cuBLAS."""
    results.say(results.summary(f16, "22_fp16_fast", "10_fp16_v2") + " Against cuBLAS: "
                + results.summary(f16, "22_fp16_fast", "cuBLAS (cupy.matmul)", prov=False))


def say_evict_first(f16) -> None:
    """The evict-first load policy (step 22_stream) against plain `__ldg` (step 22), with a clean L2."""
    results.say("With a clean L2, the evict-first policy against plain `__ldg`: " + "; ".join(
        results.compare_text(f16, "22_fp16_fast_stream", "22_fp16_fast", c) for c in (UP16, QO16))
        + f" ({results.source(f16)}). Step 22 keeps plain `__ldg`; an engine whose L2 holds dirty lines can "
        "measure the policy in place.")


def floor_text(d) -> str:
    """One device: step 27 against the read-only floor and cuBLAS, and any step beating the floor."""
    of_floor = [results.ratio(d, "27_fp16_rows", FLOOR, c) for c in CASES16]
    vs_cub = [results.ratio(d, "27_fp16_rows", "cuBLAS (cupy.matmul)", c) for c in CASES16]
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


def issue_caps(f, li) -> str:
    """One device's lab 00 record: the PTX count's cap (table `li`) on steps 25 and 26 there."""
    from ..measuring import value
    issue, roof = value(f, "instruction issue ceiling"), value(f, "read roof")
    per = dict(zip(li["step"], li["instructions per weight byte"]))
    cap = {s_: issue / per[s_] for s_ in ("25_int8_fast", "26_int4_awq")}
    bound = lambda g: ("below the read roof: by this count alone, issue would bind before the bytes" if g < roof  # noqa: E731
                       else "above the read roof: by this count, issue does not bind")
    return ("Not measured or recorded yet." if roof != roof else
            f"At the measured issue ceiling ({issue:,.0f} G instructions/s, lab 00), the PTX count caps step 25 (int8) "
            f"at {cap['25_int8_fast']:,.0f} GB/s of weights ({bound(cap['25_int8_fast'])}) and step 26 (int4) at "
            f"{cap['26_int4_awq']:,.0f} GB/s ({bound(cap['26_int4_awq'])}); the read roof is {roof:,.0f} GB/s "
            f"({results.source(f)}).")


def say_issue_caps(fund, li) -> None:
    """issue_caps for the device on screen, then why a PTX count is only a lower bound."""
    results.each_device(fund, lambda f: issue_caps(f, li))
    built = ", ".join(dict.fromkeys(BEST[p][:2] for p in ("int8", "int4", "w8a16")))
    results.say("A PTX count is a guide to the instructions, not a count of them: ptxas adds address arithmetic and "
                "may fold moves, and the loads themselves compete for the L1 (step 25 reads 4 bytes of fp32 x per "
                f"weight byte). The compute-only build below measures the instructions of the default steps ({built}) "
                "directly, and its verdict is the one to keep"
                + ("; step 26 has no such build, so its cap above stays a model." if "26" not in built else "."))


def int4_tiles_said(part) -> str:
    """Steps 35 and 36 against step 28 (int4)."""
    return (results.summary(part, "35_int4_pipelined", "28_int4_mma")
            + " " + results.summary(part, "36_int4_tiles", "28_int4_mma", prov=False))


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


def span(d, col, step) -> str:
    """'lo–hi' of column `col` of `step`'s rows in one device's rows of the limits table ('n/a' if none)."""
    v = d.loc[d["step"] == step, col].dropna()
    return f"{v.min():.2f}–{v.max():.2f}" if len(v) else "n/a"


def bound(d, step) -> str:
    """At how many shapes `step`'s instructions take longer than its bytes beyond noise (limits table)."""
    v = d.loc[(d["step"] == step) & (d["instructions vs bytes"] != "n/a"), "instructions vs bytes"]
    return "n/a" if v.empty else (f"its instructions take longer than its bytes beyond noise at {int((v == 'longer').sum())} "
                                  f"of {len(v)} shapes (within noise at {int((v == 'within noise').sum())})")


def limits(d) -> str:
    """One device's rows of the limits table: for the best int8, int4 and W8A16 steps, instructions
    against bytes and the kernel against the larger of the two."""
    return ("; ".join(f"step {st[:2]} ({nm}): the instructions alone take **{span(d, 'compute only / floor', st)}×** "
                      f"the time of the bytes alone, so {bound(d, st)}, and the kernel takes "
                      f"{span(d, 'kernel / max(both)', st)}× the larger of the two"
                      if span(d, "kernel / max(both)", st) != "n/a" else f"step {st[:2]} ({nm}): not recorded on this GPU yet"
                      for st, nm in ((BEST["int8"], "int8, fp32 x"), (BEST["int4"], "int4"), (BEST["w8a16"], "W8A16")))
            + f" ({d['device'].iloc[0]}).")


def say_limits(lim) -> None:
    """limits() for every device of the table."""
    if lim.empty or lim["compute only µs"].isna().all():
        results.say("Not measured or recorded yet.")
    for _, d in lim.groupby("device", sort=False):
        results.say(limits(d))


def say_crossover(xo, library="cuBLAS (cupy.matmul)", step="17_batched_fp16_float4", path="float16",
                  shapes=((4096, 4096), (12288, 4096))) -> None:
    """Where `library` (a call or a route) first beats the batched `step` beyond the noise, by tokens, at each (K, M)."""
    lines = []
    for k, m in shapes:
        win, r = first_win(xo, library, step, [case_key((n, k, m), path) for n in BATCH_TOKENS])
        if win:
            lines.append(f"at {k}×{m}, `{library}` first beats `{step}` at **{win.split('x')[0]} tokens** ({r:.2f}×)")
        elif not xo.empty:
            lines.append(f"at {k}×{m}, `{library}` never beats `{step}` up to {BATCH_TOKENS[-1]} tokens")
    results.say("Not measured or recorded yet: on a GPU this sweeps 1…512 tokens." if not lines else
                "; ".join(lines) + f" (the report switches at 8) ({results.source(xo)}).")


def say_unroll() -> None:
    """What `#pragma unroll 4` (steps 04, 06) and `__restrict__` change in the PTX."""
    results.say("The `#pragma unroll 4` of steps 04 and 06 (the course's; the report's text names no unroll) "
                + ("changes nothing in the PTX of steps 04 and 06: given the "
                "compile-time stride the compiler unrolls the same way without it, so no timing can credit it."
                if not any(unroll_pragma_changes(s) for s in ("04_f32_ldg", "06_int8_char4"))
                else "changes the PTX of step 04 or 06 (table above), so the ablation of 03 → 04 counts it with "
                "step 03's form.")
                + " `__restrict__` on `const` pointers is what lets the compiler use the read-only path "
                "(`ld.global.nc`) by itself; the table counts those loads with and without `__ldg`.")


def say_seed_times(lim) -> None:
    """The bandwidth the report's Orin times imply, and the int8 step's instructions against its bytes."""
    implied = {k: f.bytes_moved(*f.make_input((4096, 4096), dt)) / ms / 1e6 for k, (f, dt, ms) in SEED_MS.items()}
    b8 = BEST["int8"]
    results.say("The report's Orin times imply " + ", ".join(f"**{v:.0f} GB/s** for {k}" for k, v in implied.items())
                + ". The fp16 and fp32 kernels moved their bytes at the same rate, as memory-bound kernels do; the int8 "
                f"kernel moved {implied['int8'] / implied['fp32']:.0%} of that: it was not bound by its bytes on the Orin. "
                + "".join(f" The int8 step's instructions alone take {span(d, 'compute only / floor', b8)}× the time "
                          f"of its bytes alone: {bound(d, b8)} ({dev})." for dev, d in lim.groupby("device", sort=False)))


def launch_share(d) -> str:
    """One device's fp16 rows: an empty kernel's share of the fastest step at 4096 x 4096, the weights'
    time at the read roof, and the read-only kernel's time."""
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
