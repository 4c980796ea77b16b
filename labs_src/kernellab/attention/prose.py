"""Attention (lab 07): the sentences under the lab's tables. Each reads the frames on screen through
results' functions (every number and verdict computed, none typed in); a notebook cell is one call.
`*_text(part)` returns one device's Markdown (for results.each_device); `say_*` prints."""
from __future__ import annotations

from ..core import results
from .stale import each_device, stale_said
from .reference import HQ, PF_HEADS, dec_case_key, pf_case_key
from .ablation import ABLATION_PAIRS, DEC_ABLATION, PF_ABLATION
from .causal import CAUSAL_NS, SDPA_CAUSAL, causal_case_key, causal_flops
from ..core.ncu import limiter_of
from .report import (CUBLAS_BLOCK, FLASH_BLOCK, SDPA_BLOCK, BLOCK_NS, DRAM, ISS, NO_COUNTERS, OCC, TP, host_text,
                     limits_list, noisy_text, pf_vs_cublas, PF_TARGET, pf_vs_sdpa, row_step_text, then)
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


def floor_text(d) -> str:
    """The decode floor at 4096 keys for one device: the fraction of the read roof a read-only kernel
    reaches there, and the fastest step's share of that floor."""
    fl, best4 = results.pick(d, DEC_FLOOR, "frac_read", case=C4K), results.fastest(d, C4K)
    return results.unless_missing(
        fl, f"The floor: at KV length 4096 ({results.pick(d, DEC_FLOOR, 'bytes', case=C4K) / 1e6:.0f} MB), a "
            f"kernel that only reads as many bytes as the cache reaches **{fl:.2f}** of the read roof "
            f"(`{DEC_FLOOR}`: launch and ramp weigh on a few µs of data), so "
            f"{'no decode kernel can reach 0.75' if fl < 0.75 else '0.75 is within reach'} there ({results.source(d)}); "
            f"the fastest step there, `{best4}`, reaches "
            f"**{results.pick(d, best4, 'frac_read', case=C4K) / fl:.2f}** of that floor.")


def of_floor_text(d, name, case) -> str:
    """'; the read-only floor reaches F of the read roof there, so `name` is x of the floor' at one case
    ('' when the floor is not recorded there): a roof figure stated against the floor beside it."""
    fl, f = results.pick(d, DEC_FLOOR, "frac_read", case=case), results.pick(d, name, "frac_read", case=case)
    return "" if fl != fl or f != f else (f"; the read-only floor reaches {fl:.2f} of the read roof there, so `{name}` "
                                          f"is **{f / fl:.2f}** of the floor")


def say_decode(dec) -> None:
    """The decode ladder's sentences: steps 05 and 06 (lab 08's) against SDPA, at 32768 keys and by their host
    time, the floor at 4096, split-KV against one block per head, and the graph at one key."""
    for step in DEC_SAID:
        each_device(dec, lambda d: results.summary(d, step, SDPA_DEC))
        each_device(dec, lambda d: results.roof_text(d, step, C32K, 0.75, roof="read")
                    + of_floor_text(d, step, C32K) + f" ({results.source(d)}).")
    each_device(dec, floor_text)
    each_device(dec, lambda d: then(results.compare_text(d, "03_split", "02_head", C4K),
                                            f": more blocks than query heads ({results.source(d)})."))
    each_device(dec, lambda d: then(results.compare_text(d, GRAPH_DEC, "05_gqa_tile", C1),
                                            f" in GPU time at one cached token ({results.source(d)})."))
    each_device(dec, host_text)
    for step in DEC_SAID:
        each_device(dec, lambda d: results.host_text(d, step, "SDPA"))


def vs_sdpa_text(d, n) -> str:
    """The fastest prefill step against torch SDPA at N = n on one device, with its band and the target (PF_TARGET)."""
    name = results.fastest(d, pf_case_key((PF_HEADS, n), "float16"))
    r = pf_vs_sdpa(n)(d)
    return results.unless_missing(r.value, f"At N = {n} the fastest step, `{name}`, takes **{r.value:.2f}×** the "
                                           f"time of torch SDPA (band {r.lo:.2f}–{r.hi:.2f}; target ≤ {PF_TARGET:g}, "
                                           f"SDPA's speed: **{results.target_outcome(r, PF_TARGET, below=True)}**; "
                                           f"{results.source(d)}).")


def cublas_claim_text(d) -> str:
    """The seed's claim that cuBLAS beats flash attention, judged on one device's worst N >= 1024."""
    m = pf_vs_cublas(d)     # time(cuBLAS path) / time(best flash step), the worst N >= 1024
    claim = results.Measured(1 / m.value, 1 / m.hi, 1 / m.lo) if m.ok else m   # time(flash) / time(cuBLAS)
    return results.unless_missing(
        m.value, f"The seed's claim that cuBLAS is faster than flash attention: against the fastest flash step "
                 f"at each N ≥ 1024, the cuBLAS path takes at least **{m.value:.2f}×** its time (band "
                 f"{m.lo:.2f}–{m.hi:.2f}): **{results.verdict(claim)}** for these kernels ({results.source(d)}).")


def say_prefill(pf) -> None:
    """The prefill ladder's sentences: the fastest step against SDPA at 4096 and 16384, step 15 against
    cuBLAS, each of steps 13, 14 and 15 against the step before it, and the seed's cuBLAS claim."""
    for n in (4096, 16384):
        each_device(pf, lambda d: vs_sdpa_text(d, n))
    each_device(pf, lambda d: results.summary(d, "15_two_tiles", "01_cublas"))
    each_device(pf, lambda d: then(results.compare_text(d, "13_cp_async", "12_mma", C4K_PF),
                                           f": two changes together, cp.async and a second buffer stage (the "
                                           f"ablation below times each alone; {results.source(d)})."))
    each_device(pf, lambda d: then(results.compare_text(d, "14_padded", "13_cp_async", C4K_PF),
                                           f": the padded row stride alone ({results.source(d)})."))
    each_device(pf, lambda d: results.summary(d, "15_two_tiles", "14_padded")
                        + " The query rows per warp are the one change.")
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
    """Lab 06's block with flash attention against the cuBLAS block and torch's, per N (attention_share_text)."""
    for n in BLOCK_NS:
        each_device(blk, lambda d, p: results.compare_text(d, FLASH_BLOCK, CUBLAS_BLOCK, f"N={n}:float16")
                            + "; " + results.compare_text(d, FLASH_BLOCK, SDPA_BLOCK, f"N={n}:float16")
                            + f" ({results.source(d)})."
                            + (stale_said(p, attention_share_text(d, p, n)) if p is not None else ""), pf)


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


def say_limits(lim_dec, lim_pf, abl_dec=None, abl_pf=None, pf=None) -> None:
    """What limits each step: credit_text of both ablations, row_step_text, then limits_list."""
    results.say("* **Decode 04 → 05, by cause**: " + stale_said(abl_dec, credit_text(abl_dec, "decode")) + "\n"
                "* **Prefill 12 → 13, by cause**: " + stale_said(abl_pf, credit_text(abl_pf, "prefill")) + "\n"
                "* " + (stale_said(pf, row_step_text(pf), names=("11_row",)) if pf is not None else row_step_text(None)))
    results.say(limits_list(lim_dec, lim_pf))


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
