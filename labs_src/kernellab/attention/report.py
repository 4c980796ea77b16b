"""Lab 07's results: bytes models, readers, targets and sentences, lab 06's block both ways, an Orin on paper,
and the families DECODE, PREFILL and BLOCK. Steps: steps.py."""
from __future__ import annotations

import functools

import pandas as pd

from ..core.device import ORIN_PEAK_GBPS, facts
from ..core.device import ORIN_SMS as _ORIN_SMS
from ..core.family import Family, Target
from ..core.results import (NAN, Measured, best, devices, fastest, frac_band, one_source, pick, ratio_band,
                            say, select, short_device, source, target_outcome, targets as targets_table, within_noise,
                            worst_ratio, host_text as results_host_text)
from ..core.ncu import NO_COUNTERS, limiter_of
from .reference import (D, DEC_CHECK_CASES, DEC_LENGTHS, FAMILY, HKV, HQ, PF_CHECK_CASES, PF_D, PF_HEADS, PF_NS,
                        _tolerance, dec_case_key, make_decode, make_prefill, pf_case_key, reference_decode,
                        reference_prefill)
from .stale import stale_line, stale_names
from .steps import (_SCRATCH, DEC_BASELINES, DEC_FLOOR, DEC_VARIANTS, GRAPH_DEC, PF_BASELINES, PF_VARIANTS, SDPA_DEC,
                    SDPA_PF, TORCH_ATTN_KERNELS, chunks_for, prefill)

# ---- bytes and FLOPs -------------------------------------------------------------------------------

def decode_bytes(q, k, v, lens, *_):
    """The whole KV cache (capacity rows; equal to the length in every timed case), q and o."""
    return int(k.nbytes + v.nbytes + 2 * q.nbytes)


def cache_bytes(length) -> int:
    """Bytes of the KV cache (K and V, fp16) at one length."""
    return 2 * HKV * length * D * 2


def prefill_bytes(q, k, v, *_):
    """q, k and v read once, o written once."""
    return int(4 * q.nbytes)


def prefill_flops(N, heads=PF_HEADS, d=PF_D) -> float:
    """QK^T and PV: 2 x (2 N^2 d) per head (the exact head dim, not the padded one)."""
    return 4.0 * heads * N * N * d


def scores_bytes(N, heads=PF_HEADS) -> int:
    """What the cuBLAS path moves for the scores, fp16: S written and read (softmax), P written and read (P.V)."""
    return 4 * heads * N * N * 2


# ---- results readers shared by targets and sentences -----------------------------------------------

def _worst(measures):
    """The Measured of least value (NaN ones skipped), band and all: the worst case of a target."""
    ok = [m for m in measures if m.ok]
    return min(ok, key=lambda m: m.value) if ok else NAN


def dec_roof_fraction(df, min_len=4096, floor=False):
    """Worst (over lengths >= min_len) fraction of the read roof of the best variant (floor=True: of the read-only
    floor), with its band: a Measured, so the targets table applies the noise rule."""
    b = best(df, "baseline", names=[DEC_FLOOR]) if floor else best(df)
    return _worst([frac_band(df, r["name"], c, roof="read") for c, r in b.iterrows() if r["cols"] >= min_len])


def dec_vs_sdpa(df, floor=False):
    """Worst (over lengths) time(SDPA) / time(best variant), with its band (results.ratio_band);
    floor=True: the read-only floor in place of the best variant (the most any kernel could score)."""
    b = best(df, "baseline", names=[DEC_FLOOR]) if floor else best(df)
    return worst_ratio(df, b, SDPA_DEC)


def dec_of_floor(df, min_len=4096):
    """Worst (over lengths >= min_len) time(read-only floor) / time(best variant): the best step's fraction
    of its floor, with its band (results.ratio_band)."""
    b = best(df)
    return worst_ratio(df, b[b["cols"] >= min_len] if len(b) else b, DEC_FLOOR)


def floor_outcome(m, fl, threshold, below=False) -> str:
    """target_outcome, except that a miss the measured floor misses too is 'out of reach here', with the floor's
    figure and the step's fraction of the floor (never a plain 'missed')."""
    out = target_outcome(m, threshold, below)
    if out != "missed" or fl is None or not fl.ok or target_outcome(fl, threshold, below) != "missed":
        return out
    frac = fl.value / m.value if below else m.value / fl.value
    return f"out of reach here (the floor: {fl.value:.2f}); {frac:.2f} of the floor"


def targets_vs_floor(targets, df):
    """results.targets, each target with a floor also judged against it (floor_outcome) on every device."""
    tg = targets_table(targets, df)
    parts = devices(df)
    as_m = lambda v: v if isinstance(v, Measured) else Measured(float(v), float("nan"), float("nan"))  # noqa: E731
    cols = ["outcome"] + [f"outcome on {short_device(p['device'].iloc[0])}" for p in parts[1:]]
    fracs = []
    for i, t in enumerate(targets):
        frac = "-"
        for part, col in zip(parts, cols):
            if t.floor is None or col not in tg:
                continue
            m, fl = as_m(t.measure(part)), as_m(t.floor(part))
            tg.loc[i, col] = floor_outcome(m, fl, t.threshold, t.below)
            if col == "outcome" and m.ok and fl.ok:
                frac = f"{(fl.value / m.value if t.below else m.value / fl.value):.2f}"
        fracs.append(frac)
    if len(tg) and "at the floor" in tg:
        tg.insert(list(tg.columns).index("at the floor") + 1, "of the floor", fracs)
    if stale_line(df):                        # a column read from rows of an earlier version says so
        say(stale_line(df))
    return tg


def gqa_vs_split(df):
    """Step 04 against step 03 per KV length on df's first device: time(03)/time(04) by the noise rule, the
    blocks each launches (computed by chunks_for) and the cache's bytes against that device's L2 (device.facts)."""
    d = one_source(df)
    f = facts(d) if d is not None and len(d) else {}
    rows = []
    for n in DEC_LENGTHS:
        c = dec_case_key((HQ, n), "float16")
        m = ratio_band(d, "04_gqa", "03_split", c)
        if not m.ok:
            continue
        rows.append({"KV length": n, "cache (MB)": cache_bytes(n) / 1e6,
                     "L2 (MB)": f["l2_bytes"] / 1e6 if f.get("l2_bytes") else float("nan"),
                     "blocks 03": HQ * chunks_for("03", n), "blocks 04": HKV * chunks_for("04", n),
                     "SMs": f.get("sms"), "time(03) / time(04)": m.value,
                     "04 is": "within noise" if within_noise(m) else "faster" if m.value > 1 else "slower"})
    out = pd.DataFrame(rows)
    if len(out) and d is not None and len(d):
        out["device"] = d["device"].iloc[0]
    return out


def gqa_vs_split_text(df) -> str:
    """gqa_vs_split in one line, for df's first device: at which KV lengths step 04 is slower, within noise, faster."""
    g = gqa_vs_split(df)
    if g.empty:
        return "`04_gqa` against `03_split`: not measured here and not recorded yet."

    def at(verdict):
        keys = [str(n) for n in g.loc[g["04 is"] == verdict, "KV length"]]
        return f"{verdict} at {len(keys)}" + (f" (KV length {', '.join(keys)})" if keys else "")
    return (f"On the {g['device'].iloc[0]}, over {len(g)} KV lengths `04_gqa` is "
            + "; ".join(at(v) for v in ("slower", "within noise", "faster")) + f" than `03_split` ({source(df)}).")


def host_text(df) -> str:
    """Step 05's host time per call against SDPA's call (results.host_text, with its measured reason)."""
    return results_host_text(df, "05_gqa_tile", "SDPA")


def host_table(df):
    """Host time, kept apart from GPU time, of one eager `05_gqa_tile` call per KV length on df's first device: its
    launches (the merge is a second one), `host_us` beside the same launches as bare kernel calls (`bare_host_us`)
    and its GPU time, and the CUDA graph replay's `host_us`."""
    d = one_source(df)
    e, g = select(d, name="05_gqa_tile"), select(d, name=GRAPH_DEC)
    if e is None or e.empty or "host_us" not in e or e["host_us"].isna().all():
        return "Host time of step 05: not measured here and not recorded yet."
    f = facts(d)
    out = e.set_index("cols")[["host_us", "bare_host_us", "median_us"]]
    if f.get("arch"):
        per_sm = blocks_per_sm_on(f["arch"])
        out.insert(0, "launches", [1 + (chunks_for("05", int(n), f["sms"], per_sm) > 1) for n in out.index])
    out["graph replay host_us"] = g.set_index("cols")["host_us"]
    return out.round(1).rename_axis(f"KV length, `05_gqa_tile` eager ({source(d)})")


def noisy_text(df, spread=1.5) -> str:
    """A note on the rows of df's first device whose p90/p10 exceeds `spread` (too few or disturbed repetitions),
    named beside the table rather than read as a result; '' when there are none."""
    n = one_source(df)
    n = n[n["p90_us"] / n["p10_us"] > spread] if n is not None and len(n) else None
    if n is None or n.empty:
        return ""
    rows = "; ".join(f"`{r['name']}` at `{r['case']}`: median {r['median_us']:.1f} µs, p10–p90 "
                     f"{r['p10_us']:.1f}–{r['p90_us']:.1f} µs" + (f" over {int(r['reps'])} repetitions"
                                                                   if r.get("reps") == r.get("reps") else "")
                     for _, r in n.iterrows())
    return (f"A noisy record, not a result: {rows} (p90/p10 above {spread:g}: a disturbed or cold start; "
            f"a ratio against it means little; re-record it with `make bench`) ({source(df)}).")


DECODE = Family(
    name="attention_decode", kernels=FAMILY, roof="read", variants=DEC_VARIANTS, reference=reference_decode,
    make_input=make_decode, bytes_moved=decode_bytes, check_cases=DEC_CHECK_CASES,
    record_cases=[((HQ, n), "float16") for n in DEC_LENGTHS], baselines=DEC_BASELINES,
    shapes={f"Qwen3-8B decode, KV length {n}": (HQ, n) for n in DEC_LENGTHS},
    default={"float16": "05_gqa_tile"}, case_key=dec_case_key, tolerance=_tolerance,
    limiters=tuple((name, (HQ, n), kernel) for step, lengths in (("05_gqa_tile", (1024, 32768)),
                                                                 ("06_gqa_flash", (64, 4096)))
                   for n in lengths for name, kernel in ((step, None), (SDPA_DEC, TORCH_ATTN_KERNELS))),
    targets=(Target("best step, worst fraction of the read roof at KV length >= 4096", dec_roof_fraction, 0.75,
                    floor=functools.partial(dec_roof_fraction, floor=True)),
             Target("best step, worst fraction of its read-only floor at KV length >= 4096", dec_of_floor, 0.90),
             Target("time(torch SDPA) / time(best step), worst over every length", dec_vs_sdpa, 1.0,
                    floor=functools.partial(dec_vs_sdpa, floor=True))),
    about="Qwen3-8B decode attention: 32 q heads, 8 KV heads, head dim 128, fp16 cache")


# ---- prefill: the ladder, its targets and its family -----------------------------------------------

def then(text: str, why: str) -> str:
    """A computed comparison sentence, with its explanation added only when it was measured."""
    return text if "not measured" in text else text + why


def prefill_compare(min_n=64, row_n=1024):
    """The prefill ladder at N >= min_n. Live, step 11 is timed at N = row_n only (it takes
    milliseconds beyond) and the cuBLAS path where its N^2 scores fit in half the free memory;
    without a GPU, every recorded row (make bench times every step at every N)."""
    from ..core import bench
    from ..core.device import is_live
    cases = [c for c in PREFILL.record_cases if c[0][1] >= min_n]
    if not is_live():
        return bench.compare(PREFILL, cases, host=False)
    import cupy
    room = cupy.cuda.Device().mem_info[0] // 2
    held = lambda n: 2 * PF_HEADS * n * n * 2                      # noqa: E731  S and P, fp16, [H, N, N] each
    parts = [bench.compare(PREFILL, [c], host=False, names=[n for n in PF_VARIANTS if n != "11_row" and
                                                           (n != "01_cublas" or held(c[0][1]) < room)])
             for c in cases]
    parts.append(bench.compare(PREFILL, [c for c in cases if c[0][1] == row_n] or cases[:1], names=["11_row"],
                               baselines=False, host=False))
    for k in [k for k in _SCRATCH if k[0] in ("pf_scores", "pf_probs")]:
        del _SCRATCH[k]                                            # gigabytes at large N: not kept for later cells
    return pd.concat(parts, ignore_index=True)


PF_TARGET = 1.0        # issue 38: prefill at least SDPA's speed at N = 1024, 4096 and 16384


def pf_vs_sdpa(N):
    """time(best variant) / time(SDPA) at N, with its band (<= PF_TARGET is the target)."""
    def measure(df):
        c = pf_case_key((PF_HEADS, N), "float16")
        name = fastest(df, c)
        return ratio_band(df, SDPA_PF, name, c) if name else NAN
    return measure


def pf_vs_cublas(df, min_n=1024):
    """Worst over N >= min_n of time(cuBLAS path) / time(best flash step, 11..15), with its band."""
    b = best(df, names=[n for n in PF_VARIANTS if n != "01_cublas"])
    return worst_ratio(df, b[b["cols"] >= min_n] if len(b) else b, "01_cublas")


PREFILL = Family(
    name="attention_prefill", kernels=FAMILY, variants=PF_VARIANTS, reference=reference_prefill,
    make_input=make_prefill, bytes_moved=prefill_bytes, check_cases=PF_CHECK_CASES,
    record_cases=[((PF_HEADS, n), "float16") for n in PF_NS], baselines=PF_BASELINES,
    shapes={f"ViT prefill, N = {n}": (PF_HEADS, n) for n in PF_NS},
    default={"float16": "15_two_tiles"}, case_key=pf_case_key, tolerance=_tolerance,
    limiters=tuple((name, (PF_HEADS, 4096), kernel) for name, kernel in
                   (("14_padded", None), ("15_two_tiles", None), (SDPA_PF, TORCH_ATTN_KERNELS))),
    targets=(*(Target(f"time(best step) / time(torch SDPA) at N = {n}", pf_vs_sdpa(n), PF_TARGET, below=True)
               for n in (1024, 4096, 16384)),
             Target("time(cuBLAS path) / time(best flash step), worst at N >= 1024", pf_vs_cublas, 1.0)),
    about="Qwen3-VL ViT prefill attention: 16 heads x 72, non-causal")


# ---- what limits them: sentences from the recorded Nsight Compute readings (results.limiters) -----------

TP, SMEM, OCC, ISS, DRAM = ("tensor pipe busy (%)", "shared memory busy (%)", "achieved occupancy (%)",   # core.ncu's rows
                        "issue slots busy (%)", "DRAM throughput (% of peak)")


def limits_line(lim, cols) -> str:
    """The one rule's verdict (core.ncu.limiter) on each launch `cols` of a results.limiters table (its counters
    are the table on screen); NO_COUNTERS without them."""
    if lim is None or not set(cols) <= set(getattr(lim, "columns", ())):
        return NO_COUNTERS
    return "Read by the one rule: " + "; ".join(f"`{c}`: {limiter_of(lim, c)}" for c in cols) + "."


def prefill_limits_text(lim, n=4096) -> str:
    """What limits steps 14 and 15 and SDPA at N = n, from results.limiters(PREFILL)."""
    return limits_line(lim, [f"{x} @ {PF_HEADS}x{n}:float16" for x in ("14_padded", "15_two_tiles", SDPA_PF)])


def decode_limits_text(lim, long=32768, short=1024) -> str:
    """What limits step 05 and SDPA at a long and a short KV length, from results.limiters(DECODE)."""
    return limits_line(lim, [f"{x} @ {HQ}x{n}:float16" for n in (long, short) for x in ("05_gqa_tile", SDPA_DEC)])


def limits_list(lim_dec, lim_pf, long=32768, n=4096) -> str:
    """The counter-based entries of "What limits each step": decode 05 at a long cache, prefill 14 and 15 at N = n."""
    return "\n".join((f"* **Decode 04–05**: {limits_line(lim_dec, [f'05_gqa_tile @ {HQ}x{long}:float16'])}",
                      "* **Prefill 13–15**: " + limits_line(lim_pf, [f"{x} @ {PF_HEADS}x{n}:float16"
                                                                     for x in ("14_padded", "15_two_tiles")])))


# ---- lab 06's block, with its attention both ways ---------------------------------------------------

BLOCK_NS = (1024, 4096)
CUBLAS_BLOCK = "our block, cuBLAS + softmax attention (lab 06)"
FLASH_BLOCK = "our block, flash attention (lab 07)"
SDPA_BLOCK = "torch eager block (SDPA)"


def block_rows(ns=BLOCK_NS, seed=0) -> list:
    """Lab 06's ViT block with its cuBLAS + softmax attention and with prefill's default flash step, beside
    torch's eager block with SDPA, on the same weights and input: GPU time, L2 flushed."""
    from .. import vit_block as vb
    from ..core import bench
    rows = []
    for n in ns:
        gh, gw = vb.grid_for(n)
        for name, att in ((CUBLAS_BLOCK, None), (FLASH_BLOCK, prefill)):
            b = vb.Block(gh, gw, seed=seed, attention=att)
            rows.append({"case": f"N={n}:float16", "cols": n, "name": name, "kind": "variant",
                         **bench.time_fn(lambda: vb.run(b.ops)).row()})   # noqa: F821  (b: the loop's block)
        tb = vb.torch_block(b.W, b.x, gh, gw, sdpa=True)
        if tb is not None:
            rows.append({"case": f"N={n}:float16", "cols": n, "name": SDPA_BLOCK, "kind": "baseline",
                         **bench.time_fn(tb).row()})
        del b, tb
    return rows


def block_compare(ns=BLOCK_NS):
    """block_rows live, or the recorded rows (attention_block.csv), or a loud skip."""
    from ..core.results import live_or_recorded
    return live_or_recorded("attention_block", "lab 06's block with each attention beside torch's block with SDPA",
                            lambda: block_rows(ns))


def block_vs_torch(df, n=4096):
    return ratio_band(df, FLASH_BLOCK, SDPA_BLOCK, f"N={n}:float16")


BLOCK = Family(
    name="attention_block", kernels=FAMILY, record=block_compare,
    targets=(Target("time(torch SDPA block) / time(our block with flash attention) at N = 4096", block_vs_torch, 1.0),),
    about="lab 06's ViT block with lab 07's flash attention in place of cuBLAS + softmax, against torch + SDPA")


# ---- an Orin on paper (a model, not a measurement) ------------------------------------------------

ORIN_BOARD = "agx"                       # the AGX Orin of the seeds
ORIN_SMS = _ORIN_SMS[ORIN_BOARD]         # the datasheet figures, kept in one place: kernellab.device
ORIN_GBPS = ORIN_PEAK_GBPS[ORIN_BOARD]


def blocks_per_sm_on(arch: str, threads: int = 128) -> int:
    """Step 05's resident blocks per SM on `arch`, from its ptxas register count (no GPU needed)."""
    from ..core.build import occupancy
    occ = occupancy(FAMILY, "05_decode_gqa_tile", threads)
    return int(occ.loc[occ["arch"] == arch, "blocks/SM"].iloc[0])


def orin_decode_model(dec=None, lengths=DEC_LENGTHS, gbps=ORIN_GBPS, bound=0.5):
    """Predicted µs per decode attention call on an AGX Orin from bytes alone: bytes / (f x the datasheet
    GB/s), f the fraction of the read roof the best step reaches at the longest recorded length of `dec`'s
    device on screen (the premise measured there, not assumed). Per length, what the same record measured
    bounds the read-only floor (a kernel that only reads the cache): its bytes where it reaches `bound` of
    the read roof, else launch and ramp, where the bytes-only time is a lower bound. A model, labelled so."""
    per_sm = blocks_per_sm_on("sm_87")
    d = one_source(dec) if dec is not None and len(dec) else None
    longest = dec_case_key((HQ, max(lengths)), "float16")
    best = fastest(d, longest) if d is not None else None
    f = pick(d, best, "frac_read", case=longest) if best else float("nan")
    dev = d["device"].iloc[0] if d is not None else "no record"
    rows = []
    for n in lengths:
        b = 2 * HKV * n * D * 2 + 2 * HQ * D * 2
        fl = pick(d, DEC_FLOOR, "frac_read", case=dec_case_key((HQ, n), "float16")) if d is not None else float("nan")
        rows.append({"KV length": n, "MiB read": b / 2**20,
                     "model µs (Orin AGX, bytes only)": b / (f * gbps * 1e3) if f == f else float("nan"),
                     f"what bounds the floor on {dev}": "not recorded" if fl != fl else
                     f"bytes ({fl:.2f} of the read roof)" if fl >= bound else
                     f"launch and ramp ({fl:.2f} of the read roof): the model is a lower bound",
                     f"chunks (step 05's rule, {ORIN_SMS} SMs x {per_sm} blocks)": chunks_for("05", n, ORIN_SMS, per_sm)})
    out = pd.DataFrame(rows)
    old = f", a row recorded with an earlier version of `{best}`" if best in stale_names(d) else ""
    out["source"] = (f"model: {f:.2f} (`{best}` at {max(lengths)} keys on {dev}{old}) x {gbps:g} GB/s (datasheet), "
                     f"{ORIN_SMS} SMs; not a measurement")
    return out


def fp32_peak_gflops(device: str) -> float:
    """Lab 00's recorded fp32 FMA peak (GFLOP/s) of one device, NaN when not recorded."""
    from ..core.store import load_recorded
    r = select(load_recorded("measuring"), quantity="fp32 FMA peak", device=device)
    return float(r["value"].iloc[0]) if len(r) else float("nan")


def row_step_text(pf, n=4096) -> str:
    """Step 11 (CUDA cores) at N = n on pf's first device: its TFLOP/s against lab 00's fp32 FMA peak."""
    d = one_source(pf)
    t = pick(d, "11_row", "median_us", case=pf_case_key((PF_HEADS, n), "float16"))
    if t != t:
        return f"**11**: not measured at N = {n} here and not recorded yet."
    tf, peak = prefill_flops(n) / t / 1e6, fp32_peak_gflops(d["device"].iloc[0]) / 1e3
    said = f"**11**: at N = {n} it runs **{tf:.1f} TFLOP/s**"
    if peak == peak:
        said += (f", {tf / peak:.2f} of lab 00's fp32 FMA peak ({peak:.1f} TFLOP/s)"
                 + (", so its multiply-adds do not bound it" if tf / peak < 0.5 else ""))
    return (said + "; no counter of step 11 is recorded, so what does (candidates: two block reductions per "
            f"128-key tile, a P·V loop on 72 of 128 threads) is not measured here ({source(d)}).")
