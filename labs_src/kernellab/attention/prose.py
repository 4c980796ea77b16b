"""Attention (lab 07): the sentences under the lab's tables. Each reads the frames on screen through
results' functions (every number and verdict computed, none typed in); a notebook cell is one call.
`*_text(part)` returns one device's Markdown (for results.each_device); `say_*` prints."""
from __future__ import annotations

import pandas as pd

from ..core import results
from .stale import each_device, stale_said
from .reference import DEC_LENGTHS, HQ, PF_HEADS, PF_NS, dec_case_key, pf_case_key
from .ablation import ABLATION_PAIRS, DEC_ABLATION, PF_ABLATION
from .causal import CAUSAL_NS, SDPA_CAUSAL, causal_case_key, causal_flops
from ..core.ncu import limiter_of
from .report import (CUBLAS_BLOCK, FLASH_BLOCK, SDPA_BLOCK, BLOCK_NS, DRAM, ISS, NO_COUNTERS, OCC, TP, host_table, noisy_text,
                     pf_vs_cublas, row_step_text)
from .steps import DEC_FLOOR, GRAPH_DEC, SDPA_DEC, SDPA_PF

C4K, C1 = dec_case_key((HQ, 4096), "float16"), dec_case_key((HQ, 1), "float16")     # decode at 4096 keys, 1 key
C32K = dec_case_key((HQ, 32768), "float16")
C4K_PF = pf_case_key((PF_HEADS, 4096), "float16")                                    # prefill at N = 4096
DEC_SAID = ("05_gqa_tile", "06_gqa_flash")     # the decode steps said against SDPA: 05, and 06 (lab 08 calls it)


def say_noisy(dec) -> None:
    """Name every recorded device's noisy rows (noisy_text) beside the table; nothing when none is noisy."""
    for part in results.devices(dec):
        if noisy_text(part):
            results.say(stale_said(part, noisy_text(part)))


def pairs(df, rows, title: str) -> None:
    """results.pairs on the device on screen, then a note where a row it reads ran an earlier version of its step."""
    d = results.one_source(df)
    results.pairs(d, rows, title)
    if note := stale_said(d, "", names=[n for r in rows for n in r[1:3]]):
        results.say(note.strip())


def floor_table(dec):
    """Steps 05 and 06 (and the fastest at 4096 keys) beside the read-only floor at 4096 and 32768 keys: each
    one's fraction of the read roof, the 0.75 target's outcome by the noise rule, and its fraction of the floor."""
    d = results.one_source(dec)
    out = {}
    for name in dict.fromkeys(n for n in (DEC_FLOOR, *DEC_SAID, results.fastest(d, C4K)) if n):
        for n, c in ((4096, C4K), (32768, C32K)):
            m, fl = results.frac_band(d, name, c, "read"), results.pick(d, DEC_FLOOR, "frac_read", case=c)
            out.setdefault(name, {}).update({f"{n} keys: of the read roof": round(m.value, 2),
                                             f"{n} keys: target 0.75": results.target_outcome(m, 0.75),
                                             f"{n} keys: of the floor": round(m.value / fl, 2)})
    mb = results.pick(d, DEC_FLOOR, "bytes", case=C4K) / 1e6
    return pd.DataFrame(out).T.rename_axis(f"4096 keys read {mb:.0f} MB ({results.source(d)})")


def say_decode(dec) -> None:
    """The decode ladder's pairs by the noise rule, the read roof against its floor, step 06 (lab 08's) against
    SDPA over every length, step 05's host time per length, and that of steps 05 and 06 against SDPA's call."""
    from IPython.display import display
    pairs(dec, [*(("step 05 against the library", "05_gqa_tile", SDPA_DEC, dec_case_key((HQ, n), "float16"))
                  for n in DEC_LENGTHS), *(("step 06 against the library", DEC_SAID[1], SDPA_DEC, c) for c in (C4K, C32K)),
                ("more blocks than query heads", "03_split", "02_head", C4K),
                ("step 05 replayed as a CUDA graph (GPU time)", GRAPH_DEC, "05_gqa_tile", C1)], "the decode ladder")
    display(floor_table(dec))
    each_device(dec, lambda d: results.summary(d, DEC_SAID[1], SDPA_DEC))
    display(host_table(dec))
    for step in DEC_SAID:
        each_device(dec, lambda d: results.host_text(d, step, "SDPA"))


def cublas_claim_text(d) -> str:
    """The seed's claim that cuBLAS beats flash attention, judged on one device's worst N >= 1024."""
    m = pf_vs_cublas(d)     # time(cuBLAS path) / time(best flash step), the worst N >= 1024
    claim = results.Measured(1 / m.value, 1 / m.hi, 1 / m.lo) if m.ok else m   # time(flash) / time(cuBLAS)
    return results.unless_missing(
        m.value, f"The seed's claim that cuBLAS is faster than flash attention: against the fastest flash step "
                 f"at each N ≥ 1024, the cuBLAS path takes at least **{m.value:.2f}×** its time (band "
                 f"{m.lo:.2f}–{m.hi:.2f}): **{results.verdict(claim)}** for these kernels ({results.source(d)}).")


def say_prefill(pf) -> None:
    """The prefill ladder's pairs by the noise rule (steps 13, 14 and 15 each against the step before, the fastest
    against SDPA and the cuBLAS path), then the seed's cuBLAS claim."""
    d = results.one_source(pf)
    at = {n: pf_case_key((PF_HEADS, n), "float16") for n in PF_NS}
    best = {n: results.fastest(d, at[n]) for n in (4096, 16384)}
    pairs(pf, [("cp.async and a second buffer stage (the ablation below takes them apart)", "13_cp_async", "12_mma",
                C4K_PF), ("the padded row stride", "14_padded", "13_cp_async", C4K_PF),
               *(("two query tiles per warp", "15_two_tiles", "14_padded", at[n]) for n in PF_NS),
               *(("the fastest step against the library", best[n], SDPA_PF, at[n]) for n in best),
               *(("flash attention against the cuBLAS path", "15_two_tiles", "01_cublas", at[n]) for n in PF_NS)],
          "the prefill ladder")
    each_device(pf, cublas_claim_text, names=tuple(pf["name"].unique()) if len(pf) else ())   # it reads every step


def attention_share_text(d, pf, n) -> str:
    """Whether the block's lead over torch's comes from its attention: the fastest flash step against
    torch SDPA at N = n on the same device (the prefill table), by the noise rule."""
    name = results.fastest(pf, pf_case_key((PF_HEADS, n), "float16"))
    m = results.ratio_band(pf, SDPA_PF, name, pf_case_key((PF_HEADS, n), "float16")) if name else results.NAN
    if not m.ok:
        return ""
    if results.within_noise(m):
        return f" Attention alone: `{name}` and torch SDPA are within noise of each other at N = {n}."
    if m.value > 1:
        return (f" Attention alone: `{name}` takes **{m.value:.2f}×** torch SDPA's time at N = {n} (the prefill "
                f"table), so the block's lead over torch's eager block comes from its other kernels (lab 06), not "
                f"from flash attention.")
    return f" Attention alone: `{name}` is **{1 / m.value:.2f}×** faster than torch SDPA at N = {n}."


def say_block(blk, pf=None) -> None:
    """Lab 06's block with flash attention against the cuBLAS block and torch's, per N, then whether the lead over
    torch's comes from the attention (attention_share_text)."""
    pairs(blk, [(what, FLASH_BLOCK, other, f"N={n}:float16") for n in BLOCK_NS for what, other in
                (("flash attention in place of cuBLAS + softmax", CUBLAS_BLOCK), ("against torch's block", SDPA_BLOCK))],
          "lab 06's block")
    for n in BLOCK_NS:
        if pf is not None:
            each_device(pf, lambda p: attention_share_text(p, p, n).strip())


# ---- step 16: the causal prefill against SDPA -------------------------------------------------------

def causal_text(d) -> str:
    """Step 16 against torch SDPA (is_causal, enable_gqa) at each recorded N of one device: time(SDPA) /
    time(16) with its band, judged against the target (>= 1) by the noise rule, and both TFLOP/s."""
    said = []
    for n in CAUSAL_NS:
        c = causal_case_key((32, n), "float16")
        m = results.ratio_band(d, "16_causal", SDPA_CAUSAL, c)
        if not m.ok:
            continue
        tf = lambda name: causal_flops(n) / results.pick(d, name, "median_us", case=c) / 1e6   # noqa: E731
        said.append(f"N = {n}: **{m.value:.2f}×** (band {m.lo:.2f}–{m.hi:.2f}; target ≥ 1: "
                    f"**{results.target_outcome(m, 1.0)}**; {tf('16_causal'):.0f} against {tf(SDPA_CAUSAL):.0f} TFLOP/s)")
    if not said:
        dev = d["device"].iloc[0] if d is not None and len(d) and "device" in d else None
        return (f"`16_causal` against torch SDPA: not recorded on {dev} yet." if dev else
                "`16_causal` against torch SDPA: not measured here and not recorded yet.")
    return ("time(torch SDPA) / time(`16_causal`), causal attention over a Qwen3-8B prompt (32 query heads over 8 KV "
            "heads of 128): " + "; ".join(said) + f" ({results.source(d)}).")


# ---- the ablations: each cause credited by what its ablation measures --------------------------------

def credit_text(abl, which: str) -> str:
    """What each of the first two changes of a bundled step is worth, each given the other, from its ablation
    on abl's first device; before the ablation is recorded, that no cause is credited."""
    title, _, _, after, changes = ABLATION_PAIRS[which]
    d, fam = results.one_source(abl) if abl is not None and len(abl) else None, DEC_ABLATION if which == "decode" else PF_ABLATION
    if d is None or after not in set(d["name"]):
        return (f"{title}: its ablation is not recorded yet (`make bench` records `{fam.name}`), "
                "so neither change is credited here.")
    return (f"{title}, each change given the other (the ablation, {results.source(d)}): "
            + "; ".join(f"{what}: " + results.summary(d, w, wo, prov=False).rstrip(".") for what, w, wo in changes[:2])
            + ".")


def say_limits(pf) -> None:
    """What limits step 11 (row_step_text); the ablations credit each change and the counters' verdicts are above."""
    each_device(pf, row_step_text, names=("11_row",))


# ---- where the default steps miss: their counters, read by the one rule (core.ncu.limiter) ------------

def decode06_limits_text(lim, short=64, long=4096) -> str:
    """The counters of step 06 (the decode lab 08 calls) beside SDPA's kernel at a short cache and at the shortest
    the floor target covers, each read by the one rule; from results.limiters(DECODE). Counters of one launch
    under the profiler: its durations are not the timed rows' (SDPA's call may launch more than this kernel)."""
    col = lambda name, n: f"{name} @ {HQ}x{n}:float16"            # noqa: E731
    if lim is None or not {col(x, n) for x in ("06_gqa_flash", SDPA_DEC) for n in (short, long)} <= set(lim.columns):
        return NO_COUNTERS
    v = lambda row, name, n: float(lim.loc[row, col(name, n)])     # noqa: E731
    us = lambda name, n: v("duration (ns)", name, n) / 1e3        # noqa: E731
    six, lim6 = "06_gqa_flash", lambda n: limiter_of(lim, col("06_gqa_flash", n))  # noqa: E731
    at = lambda n: (f"`{six}` launches {v('grid size', six, n):.0f} blocks at {v(OCC, six, n):.0f}% occupancy "  # noqa: E731
                    f"({v('registers per thread', six, n):.0f} registers a thread) and keeps DRAM {v(DRAM, six, n):.0f}% "
                    f"busy over {us(six, n):.1f} µs; SDPA's attention kernel, {v('grid size', SDPA_DEC, n):.0f} blocks "
                    f"at {v(OCC, SDPA_DEC, n):.0f}%, DRAM {v(DRAM, SDPA_DEC, n):.0f}% over {us(SDPA_DEC, n):.1f} µs. "
                    f"Read by the one rule: in ours {lim6(n)}; in SDPA's {limiter_of(lim, col(SDPA_DEC, n))}")
    return (f"Step 06 under the profiler (one launch each). At KV length {short}: {at(short)}. At {long} keys, the "
            f"shortest cache the floor target covers: {at(long)}.")


def causal_limits_text(lim, n=4096) -> str:
    """What limits step 16 and SDPA's causal kernel at N = n, from results.limiters(PREFILL_CAUSAL)."""
    a, t = f"16_causal @ {causal_case_key((32, n), 'float16')}", f"{SDPA_CAUSAL} @ {causal_case_key((32, n), 'float16')}"
    if lim is None or not {a, t} <= set(lim.columns):
        return NO_COUNTERS
    v = lambda row, c: float(lim.loc[row, c])                    # noqa: E731
    return (f"At N = {n}, step 16 keeps the tensor pipe **{v(TP, a):.0f}%** busy and SDPA's causal kernel "
            f"**{v(TP, t):.0f}%**. Step 16 launches {v('grid size', a):.0f} blocks at {v(OCC, a):.0f}% occupancy "
            f"({v('registers per thread', a):.0f} registers a thread), its issue slots busy {v(ISS, a):.0f}%: "
            f"{limiter_of(lim, a)}. SDPA's kernel launches {v('grid size', t):.0f} blocks at {v(OCC, t):.0f}% "
            f"occupancy: {limiter_of(lim, t)}. Which of step 16's differences from it costs the time is not "
            f"isolated here (no ablation of step 16).")
